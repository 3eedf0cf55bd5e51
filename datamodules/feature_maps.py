"""Fixed feature maps a linear learner trains on, fitted once on the training documents and
exported with the scorer (so the exported file still takes raw features in).

``QuantileThresholds`` appends, for every feature, the indicators ``x_f >= t_{f,b}`` at the
training documents' quantiles ``t_{f,b}``: a linear model over them is an additive step function
of each feature (the span of RankBoost's threshold weak rankers), so a perceptron can learn that a
feature helps up to a point and no further, which a weight on ``x_f`` alone cannot express.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class QuantileThresholds(nn.Module):
    """``[..., F] -> [..., F * (1 + T)]``: the features, then ``scale * (x_f >= t_{f,b})``.

    Args:
        n_features: F.
        bins: the thresholds are the ``bins - 1`` inner quantiles (``1/bins, ..., (bins-1)/bins``,
            numpy's linear interpolation) of each feature over the training documents, so T =
            ``bins - 1`` columns per feature. A threshold equal to a lower one of the same feature,
            or not above the feature's minimum (its indicator would be constant), is +inf: its
            column is always 0, and the output width does not depend on the data.
        scale: the indicators' value. It sets how far one mistake moves a step against a raw
            (z-scored) feature: smaller is smoother.

    Before ``fit`` every threshold is +inf (the map adds zero columns).

    Example:
        >>> import torch
        >>> thresholds = QuantileThresholds(1, bins=4, scale=1.0)
        >>> _ = thresholds.fit(torch.tensor([[0.0], [1.0], [2.0], [3.0], [4.0]]))
        >>> thresholds.thresholds
        tensor([[1., 2., 3.]])
        >>> thresholds(torch.tensor([[2.5]]))
        tensor([[2.5000, 1.0000, 1.0000, 0.0000]])
    """

    def __init__(self, n_features: int, *, bins: int = 32, scale: float = 0.25) -> None:
        super().__init__()
        if bins < 2:
            raise ValueError(f"bins must be >= 2, got {bins}")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.n_features, self.bins, self.scale = n_features, bins, float(scale)
        self.register_buffer("thresholds", torch.full((n_features, bins - 1), float("inf")))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    @property
    def out_features(self) -> int:
        return self.n_features * self.bins

    @torch.no_grad()
    def fit(self, features: Tensor) -> QuantileThresholds:
        """Thresholds from the training documents ``features [N, F]`` (real documents only, no padding)."""
        if features.dim() != 2 or features.shape[1] != self.n_features:
            raise ValueError(f"expected features [N, {self.n_features}], got {tuple(features.shape)}")
        return self.fit_sorted(sorted_columns(features))

    @torch.no_grad()
    def fit_sorted(self, ordered: Tensor) -> QuantileThresholds:
        """``fit`` from each feature's sorted training values ``ordered [F, N]`` (``sorted_columns``)."""
        count = ordered.shape[1]
        if count == 0:
            raise ValueError("no training documents to fit the quantile thresholds on")
        levels = torch.arange(1, self.bins, dtype=torch.float64, device=ordered.device) / self.bins
        position = levels * (count - 1)  # numpy's "linear" method
        low, high = position.floor().long(), position.ceil().long()
        cuts = (ordered[:, low] + (ordered[:, high] - ordered[:, low]) * (position - low)).float()  # [F, T]
        repeated = torch.zeros_like(cuts, dtype=torch.bool)
        repeated[:, 1:] = cuts[:, 1:] <= cuts[:, :-1]
        constant = cuts <= ordered[:, :1].float()
        self.thresholds.copy_(cuts.masked_fill(repeated | constant, float("inf")))
        self.fitted.fill_(True)
        return self

    def live_columns(self) -> Tensor:
        """Indices ``[c]`` of the output columns that can be non-zero: the features and every
        finite threshold's indicator (a +inf threshold's column is 0 for any finite input)."""
        finite = torch.isfinite(self.thresholds).flatten()
        live = torch.cat([torch.ones(self.n_features, dtype=torch.bool, device=finite.device), finite])
        return live.nonzero().squeeze(1)

    def live_indicators(self) -> tuple[Tensor, Tensor]:
        """``(feature [m], cut [m])``: the finite thresholds and their features, in column order."""
        cut = self.thresholds.flatten()
        finite = torch.isfinite(cut)
        feature = torch.arange(self.n_features, device=cut.device).repeat_interleave(self.bins - 1)
        return feature[finite], cut[finite]

    def live_forward(self, features: Tensor) -> Tensor:
        """``forward(features)[..., live_columns()]``, without computing the other columns."""
        feature, cut = self.live_indicators()
        steps = (features.index_select(-1, feature) >= cut).to(features.dtype) * self.scale
        return torch.cat([features, steps], -1)

    def forward(self, features: Tensor) -> Tensor:
        steps = (features.unsqueeze(-1) >= self.thresholds).to(features.dtype) * self.scale  # [..., F, T]
        return torch.cat([features, steps.flatten(-2)], -1)


class ThresholdInputs(nn.Module):
    """A model's input: the normalizer, then the quantile thresholds' live columns, standardized.

    ``features [..., L, F]`` (mask ``[..., L]``) -> ``[..., L, c]``: ``normalizer(features, mask)``,
    then the indicator of each finite training-quantile threshold (``QuantileThresholds``' live
    columns, computed alone), each of the ``c`` columns z-scored with the training documents' mean
    and spread. It stands where a ``FeatureNormalizer`` stands (the model's first step and the
    export's), for any ranker whose scorer learns its own weights per input
    (``data.feature_map=thresholds``).

    Build it with ``fit``; ``kind`` names it in the export's meta.json.
    """

    def __init__(
        self, normalizer: nn.Module, feature: Tensor, cut: Tensor, mean: Tensor, std: Tensor, *, bins: int
    ) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.kind = f"{normalizer.kind}+thresholds{bins}"
        self.in_features = len(mean) - len(cut)
        self.register_buffer("feature", feature.long())  # [m] the feature each indicator reads
        self.register_buffer("cut", cut.float())  # [m] its threshold
        self.register_buffer("mean", mean.float())
        self.register_buffer("std", std.float())

    @property
    def out_features(self) -> int:
        return len(self.mean)

    @classmethod
    @torch.no_grad()
    def fit(cls, normalizer: nn.Module, documents: Tensor, *, bins: int = 32) -> ThresholdInputs:
        """From the training documents ``documents [N, F]``, already normalized by ``normalizer``."""
        ordered = sorted_columns(documents)  # one sort for the thresholds and their statistics
        thresholds = QuantileThresholds(documents.shape[1], bins=bins, scale=1.0).fit_sorted(ordered)
        # the statistics without the [N, F * bins] matrix (MSLR: 723k documents x 4,352 columns):
        # an indicator's mean is the share of documents at or above its threshold, its spread
        # sqrt(p (1 - p))
        below = torch.searchsorted(ordered, thresholds.thresholds.double(), side="left")  # [F, T]
        share = (1.0 - below.double() / len(documents)).flatten()[torch.isfinite(thresholds.thresholds).flatten()]
        values = documents.double()
        mean = torch.cat([values.mean(0), share])
        std = torch.cat([values.std(0, unbiased=False), (share * (1.0 - share)).sqrt()])
        feature, cut = thresholds.live_indicators()
        std = torch.where(std > 1e-12, std, torch.ones_like(std))
        return cls(normalizer, feature, cut, mean, std, bins=bins)

    @classmethod
    def from_thresholds(cls, normalizer: nn.Module, thresholds: QuantileThresholds) -> ThresholdInputs:
        """``thresholds.live_forward`` after ``normalizer``, unstandardized: the features as they are
        and each live indicator worth ``thresholds.scale`` (what a linear learner trained on the
        live columns reads; the export of the perceptrons)."""
        feature, cut = thresholds.live_indicators()
        n = thresholds.n_features
        mean = torch.zeros(n + len(cut))
        std = torch.cat([torch.ones(n), torch.full((len(cut),), 1.0 / thresholds.scale)])
        return cls(normalizer, feature.cpu(), cut.cpu(), mean, std, bins=thresholds.bins)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        normalized = self.normalizer(features, mask)
        steps = (normalized.index_select(-1, self.feature) >= self.cut).to(normalized.dtype)
        return (torch.cat([normalized, steps], -1) - self.mean) / self.std


def sorted_columns(features: Tensor) -> Tensor:
    """Each feature's values sorted, ``[F, N]`` float64, from documents ``features [N, F]``."""
    return features.double().t().contiguous().sort(-1).values


__all__ = ["QuantileThresholds", "ThresholdInputs", "sorted_columns"]
