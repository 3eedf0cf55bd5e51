"""Wikipedia as a hyperlinked training corpus for LinkLearn (Grangier & Bengio, section 4).

    python train.py model=linklearn data=wikipedia data.path=enwiki-pages-articles.xml.bz2
    python train.py model=linklearn data=wikipedia 'data.path=[en.xml.bz2,ltg.xml.bz2]'

``dump`` streams a MediaWiki XML dump with bounded memory; ``markup`` strips wikitext in linear
time; ``corpus`` keeps per article its term counts, title and lead sentence (pseudo-queries) and
link targets, resolves links through redirects and caches the parse; ``graph`` splits articles into
training and validation sets and removes crossing links (section 4); ``task`` joins several dumps
into one ``LinkTask`` (and mines BM25 hard negatives); ``sampling`` draws fresh examples each
epoch; ``folder`` reads corpora whose links are not inline (Wikispeedia's layout, ``docs.tsv`` +
``links.tsv``); ``datamodule`` is ``data=linked_corpus`` (and ``data=wikipedia``).

    python train.py model=linklearn data=linked_corpus data.path=../shared/data/wikispeedia
"""

from datamodules.wikipedia.cache import load_or_parse
from datamodules.wikipedia.corpus import LinkedCorpus, lead_sentence, parse_dump, resolve_links
from datamodules.wikipedia.datamodule import LinkedCorpusDataModule, WikipediaDataModule
from datamodules.wikipedia.dump import Page, WikipediaFormatError, iter_pages
from datamodules.wikipedia.folder import LinkedCorpusFormatError, read_linked_folder
from datamodules.wikipedia.graph import adjacency, split_graph
from datamodules.wikipedia.markup import MarkupStripper, normalize_title
from datamodules.wikipedia.sampling import LinkExamples
from datamodules.wikipedia.task import QUERY_KINDS, LinkTask, build_task, hard_negatives, limit_training_links

__all__ = [
    "QUERY_KINDS",
    "LinkExamples",
    "LinkTask",
    "LinkedCorpus",
    "LinkedCorpusDataModule",
    "LinkedCorpusFormatError",
    "MarkupStripper",
    "Page",
    "WikipediaDataModule",
    "WikipediaFormatError",
    "adjacency",
    "build_task",
    "hard_negatives",
    "iter_pages",
    "lead_sentence",
    "limit_training_links",
    "load_or_parse",
    "normalize_title",
    "parse_dump",
    "read_linked_folder",
    "resolve_links",
    "split_graph",
]
