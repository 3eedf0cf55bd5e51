"""Data and caches shared by many processes (several nodes on one NFS directory): published whole,
never half-written, and every writer succeeds."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from datamodules.atomic import atomic_directory, atomic_path
from datamodules.letor_io import read_letor
from datamodules.synthetic import generate_letor

SIZES = {"n_queries": {"train": 40, "val": 10, "test": 10}, "num_features": 5, "mean_docs": 8, "seed": 3}


def _generate_and_read(directory: str) -> list[str]:
    """One 'node': prepare the synthetic files, then read them through the shared parse cache."""
    files = generate_letor(directory, **SIZES)
    cache = Path(directory) / "parsed"
    return [read_letor(files[split], cache_dir=cache).features.tobytes().hex()[:64] for split in ("train", "test")]


def test_processes_sharing_a_data_directory_all_finish_with_the_same_data(tmp_path):
    # before: two nodes writing `train.tmp` at once, one's rename removed the other's file
    # (FileNotFoundError), and parse caches were written in place where a reader could see them half-done
    context = multiprocessing.get_context("fork")  # Linux, as the clusters this is for
    with context.Pool(4) as pool:
        results = pool.map(_generate_and_read, [str(tmp_path)] * 8)
    assert all(result == results[0] for result in results)
    folders = list(tmp_path.glob("synthetic-*"))
    assert len(folders) == 1
    assert sorted(p.name for p in folders[0].iterdir()) == ["params.json", "test.txt", "train.txt", "vali.txt"]
    assert not [p for p in tmp_path.rglob("*") if ".partial" in p.name]  # no temporary left behind


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "data.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as partial:
        partial.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_a_directory_published_meanwhile_by_another_process_is_kept(tmp_path):
    target = tmp_path / "cache"
    with atomic_directory(target) as partial:
        np.save(partial / "a.npy", np.arange(3))
        target.mkdir()  # another process won the race
        np.save(target / "a.npy", np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    assert np.load(target / "a.npy").tolist() == [0, 1, 2]
