"""report.png: drawn from the run's own TensorBoard events and results, never failing a run."""

from __future__ import annotations

from torch.utils.tensorboard import SummaryWriter

from rankers.report import _curves_to_draw, read_scalars, write_report

RESULTS = {"test": {"ndcg@10": 0.7, "map": 0.6}, "test_random_scores": {"ndcg@10": 0.4, "map": 0.3}}


def _events(folder, tags: dict[str, list[float]]) -> None:
    writer = SummaryWriter(str(folder / "tensorboard"))
    for tag, values in tags.items():
        for step, value in enumerate(values):
            writer.add_scalar(tag, value, (step + 1) * 10)
    writer.close()


def test_the_curves_are_read_back_as_logged(tmp_path):
    _events(
        tmp_path,
        {
            "val/ndcg@10": [0.5, 0.6, 0.65],
            "val/ndcg@10_best": [0.5, 0.6, 0.65],
            "val/rounds": [50, 100, 150],  # RankBoost's ensemble size: a count, not a metric
            "train/loss_epoch": [3, 2],
        },
    )
    scalars = read_scalars(tmp_path)
    assert scalars["val/ndcg@10"] == [(10, 0.5), (20, 0.6000000238418579), (30, 0.6499999761581421)]
    validation, training = _curves_to_draw(scalars)
    assert list(validation) == ["val/ndcg@10"] and list(training) == ["train/loss_epoch"]  # no running best, no count


def test_a_report_is_drawn_with_and_without_validation(tmp_path):
    _events(tmp_path / "a", {"val/ndcg@10": [0.5, 0.6], "train/loss_step": [3, 2, 1]})
    assert write_report(tmp_path / "a", RESULTS).read_bytes().startswith(b"\x89PNG")
    _events(tmp_path / "b", {"train/loss_step": [3, 2, 1]})  # a run without validation split
    assert (write_report(tmp_path / "b", {"test": {"ndcg@10": 0.7}}) or tmp_path).name == "report.png"


def test_nothing_to_draw_draws_nothing(tmp_path):
    assert write_report(tmp_path, {}) is None and not (tmp_path / "report.png").exists()
