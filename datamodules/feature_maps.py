"""Fixed feature maps a linear learner trains on, fitted once on the training documents and
exported with the scorer (so the exported file still takes raw features in).

``QuantileThresholds`` appends, for every feature, the indicators ``x_f >= t_{f,b}`` at the
training documents' quantiles ``t_{f,b}``: a linear model over them is an additive step function
of each feature (the span of RankBoost's threshold weak rankers), so a perceptron can learn that a
feature helps up to a point and no further, which a weight on ``x_f`` alone cannot express.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

RAW_COLUMNS = ("features", "cdf")
# a uniform on [0, 1] has spread 1 / sqrt(12): the CDF columns get the unit spread of the z-scored
# features they stand in for, so the indicators' scale keeps its meaning
CDF_SCALE = 12**0.5


class QuantileCDF(nn.Module):
    """``[..., F] -> [..., F]``: each feature's training CDF, linear between its quantiles, times sqrt(12).

    ``knots [F, bins + 1]`` are the training documents' quantiles at ``0, 1/bins, ..., 1`` (numpy's
    linear method). Segment ``b`` adds ``1/bins`` times how far ``x`` is through ``[k_b, k_{b+1}]``
    (0 below it, 1 above it); a segment of zero width (many documents share one value) is a step at
    that value, so ``x`` gets the share of the documents at or below it to within one segment. Below
    the training minimum the column is 0, above the maximum sqrt(12): a test value beyond the
    training range scores as the training extreme does. An increasing map of a feature moves its
    knots with it, so the column moves by at most about a segment's share (the interpolation within
    a segment is linear in the feature's own units): raw counts, log counts and z-scores read nearly
    the same, where z-scored heavy-tailed values would put a few documents hundreds of units away.

    The sum runs segment by segment (``O(N·F)`` memory, elementwise ops that TorchScript and ONNX
    take), not through a ``[..., F, bins]`` tensor or ``searchsorted``.

    Example:
        >>> import torch
        >>> cdf = QuantileCDF(1, bins=4).fit_sorted(torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0]]))
        >>> cdf.knots
        tensor([[0., 1., 2., 3., 4.]])
        >>> (cdf(torch.tensor([[-1.0], [1.5], [9.0]])) / 12**0.5).flatten()
        tensor([0.0000, 0.3750, 1.0000])
    """

    def __init__(self, n_features: int, *, bins: int = 32) -> None:
        super().__init__()
        self.bins = bins
        self.step_value = CDF_SCALE / bins  # an attribute: TorchScript reads no module globals
        self.register_buffer("knots", torch.zeros(n_features, bins + 1))

    @torch.no_grad()
    def fit_sorted(self, ordered: Tensor) -> QuantileCDF:
        """Knots from each feature's sorted training values ``ordered [F, N]`` (``sorted_columns``)."""
        levels = torch.arange(0, self.bins + 1, dtype=torch.float64, device=ordered.device) / self.bins
        self.knots.copy_(sorted_quantiles(ordered, levels))
        return self

    def forward(self, features: Tensor) -> Tensor:
        total = torch.zeros_like(features)
        for b in range(self.bins):
            low, high = self.knots[:, b], self.knots[:, b + 1]
            width = high - low
            # clamp before dividing: a zero width must not make 0 / 0 (its step is taken instead)
            through = ((features - low) / width.clamp_min(1e-30)).clamp(0.0, 1.0)
            total = total + torch.where(width > 0, through, (features >= high).to(features.dtype))
        return total * self.step_value


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
        raw_columns: what the first F columns hold: ``features`` (the features as given) or ``cdf``
            (``QuantileCDF``: each feature's training CDF, bounded, and unmoved by any increasing
            map of the feature, so a heavy tail or an outlier cannot dominate a mistake's step).

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

    def __init__(self, n_features: int, *, bins: int = 32, scale: float = 0.25, raw_columns: str = "features") -> None:
        super().__init__()
        if bins < 2:
            raise ValueError(f"bins must be >= 2, got {bins}")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        if raw_columns not in RAW_COLUMNS:
            raise ValueError(f"raw_columns must be one of {RAW_COLUMNS}, got {raw_columns!r}")
        self.n_features, self.bins, self.scale = n_features, bins, float(scale)
        self.register_buffer("thresholds", torch.full((n_features, bins - 1), float("inf")))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))
        # a submodule only when used: checkpoints written before it existed load unchanged
        self.raw: nn.Module = QuantileCDF(n_features, bins=bins) if raw_columns == "cdf" else nn.Identity()

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
        cuts = sorted_quantiles(ordered, levels).float()  # [F, T]
        repeated = torch.zeros_like(cuts, dtype=torch.bool)
        repeated[:, 1:] = cuts[:, 1:] <= cuts[:, :-1]
        constant = cuts <= ordered[:, :1].float()
        self.thresholds.copy_(cuts.masked_fill(repeated | constant, float("inf")))
        if isinstance(self.raw, QuantileCDF):
            self.raw.fit_sorted(ordered)
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
        return torch.cat([self.raw(features), steps], -1)

    def forward(self, features: Tensor) -> Tensor:
        steps = (features.unsqueeze(-1) >= self.thresholds).to(features.dtype) * self.scale  # [..., F, T]
        return torch.cat([self.raw(features), steps.flatten(-2)], -1)


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
        self,
        normalizer: nn.Module,
        feature: Tensor,
        cut: Tensor,
        mean: Tensor,
        std: Tensor,
        *,
        bins: int,
        raw: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.normalizer = normalizer
        # the first F columns: the normalized features, or a map of them (QuantileCDF)
        self.raw = raw if raw is not None else nn.Identity()
        cdf = "+cdf" if isinstance(self.raw, QuantileCDF) else ""
        self.kind = f"{normalizer.kind}{cdf}+thresholds{bins}"
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
    def fit(
        cls, normalizer: nn.Module, documents: Tensor, *, bins: int = 32, raw_columns: str = "features"
    ) -> ThresholdInputs:
        """From the training documents ``documents [N, F]``, already normalized by ``normalizer``;
        ``raw_columns`` as ``QuantileThresholds`` takes it (``cdf``: each feature's training CDF)."""
        ordered = sorted_columns(documents)  # one sort for the thresholds and their statistics
        thresholds = QuantileThresholds(documents.shape[1], bins=bins, scale=1.0, raw_columns=raw_columns)
        thresholds.fit_sorted(ordered)
        # the statistics without the [N, F * bins] matrix (MSLR: 723k documents x 4,352 columns):
        # an indicator's mean is the share of documents at or above its threshold, its spread
        # sqrt(p (1 - p))
        below = torch.searchsorted(ordered, thresholds.thresholds.double(), side="left")  # [F, T]
        share = (1.0 - below.double() / len(documents)).flatten()[torch.isfinite(thresholds.thresholds).flatten()]
        values = thresholds.raw(documents).double()
        mean = torch.cat([values.mean(0), share])
        std = torch.cat([values.std(0, unbiased=False), (share * (1.0 - share)).sqrt()])
        feature, cut = thresholds.live_indicators()
        std = torch.where(std > 1e-12, std, torch.ones_like(std))
        return cls(normalizer, feature, cut, mean, std, bins=bins, raw=thresholds.raw)  # thresholds is discarded

    @classmethod
    def from_thresholds(cls, normalizer: nn.Module, thresholds: QuantileThresholds) -> ThresholdInputs:
        """``thresholds.live_forward`` after ``normalizer``, unstandardized: the raw columns as the
        map gives them (the features, or their ``QuantileCDF``) and each live indicator worth
        ``thresholds.scale`` (what a linear learner trained on the live columns reads; the export of
        the perceptrons)."""
        feature, cut = thresholds.live_indicators()
        n = thresholds.n_features
        mean = torch.zeros(n + len(cut))
        std = torch.cat([torch.ones(n), torch.full((len(cut),), 1.0 / thresholds.scale)])
        raw = copy.deepcopy(thresholds.raw).cpu()
        return cls(normalizer, feature.cpu(), cut.cpu(), mean, std, bins=thresholds.bins, raw=raw)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        normalized = self.normalizer(features, mask)
        steps = (normalized.index_select(-1, self.feature) >= self.cut).to(normalized.dtype)
        return (torch.cat([self.raw(normalized), steps], -1) - self.mean) / self.std


def sorted_columns(features: Tensor) -> Tensor:
    """Each feature's values sorted, ``[F, N]`` float64, from documents ``features [N, F]``."""
    return features.double().t().contiguous().sort(-1).values


def sorted_quantiles(ordered: Tensor, levels: Tensor) -> Tensor:
    """Quantiles ``[F, len(levels)]`` of each row of ``ordered [F, N]`` (sorted), numpy's linear method."""
    position = levels * (ordered.shape[1] - 1)
    low, high = position.floor().long(), position.ceil().long()
    return ordered[:, low] + (ordered[:, high] - ordered[:, low]) * (position - low)


__all__ = ["QuantileCDF", "QuantileThresholds", "ThresholdInputs", "sorted_columns", "sorted_quantiles"]
