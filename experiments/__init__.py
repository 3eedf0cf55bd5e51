"""Paper reproductions that are not a plain pipeline run: drivers that call the library (``rankers``,
``datamodules``) and write what they measure through ``experiments.results``. Each is run by
``python train.py experiment=<name>`` (its ``entry``); family packages hold the family, not its papers' tables."""
