"""Covariance functions, a Cholesky with a jitter ladder, and the graph-deformed (semi-supervised) kernel.

Everything is batched over a leading task dimension: ``x [..., n, d]`` and ``z [..., m, d]`` give
``[..., n, m]``, so many trials, users or candidate sets are one tensor program. The kernels are
plain torch functions (no GPyTorch ``LinearOperator``), because the exported scorers must script to
TorchScript and ONNX; GPyTorch's and scikit-learn's RBF kernels are the references in the tests.

The Gaussian kernel is eq. (2) of Chu & Ghahramani:
``K(x, z) = kappa0 * exp(-1/2 sum_l kappa_l (x_l - z_l)^2)``, with one ``kappa`` for every feature
(isotropic, the paper's) or one per feature (ARD). ``kappa`` is the inverse squared length-scale.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from datamodules.errors import DataError

# the GP family's one jitter ladder (every Cholesky of rankers.gp goes through cholesky_jitter):
# relative jitters tried in turn, in units of the mean diagonal of the matrix (0 first: a matrix
# that factors as given is not changed). float32 Gram matrices of near-duplicate points are
# routinely indefinite by ~1e-7 relative; 1e-2 is the last resort before giving up.
JITTER_LADDER: tuple[float, ...] = (0.0, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)


class NotPositiveDefiniteError(DataError):
    """The GP family's one numerical error: a matrix indefinite past the whole jitter ladder, with
    NaN/inf entries, or a kernel that is no covariance (``ordinal.check_kernel``). A ``DataError``
    (hence a ``ValueError``): ``train.py`` reports it in one line."""


def squared_distances(x: Tensor, z: Tensor) -> Tensor:
    """``|x_i - z_j|^2`` for ``x [..., n, d]``, ``z [..., m, d]`` -> ``[..., n, m]`` (>= 0).

    Example:
        >>> squared_distances(torch.tensor([[0.0, 0.0]]), torch.tensor([[3.0, 4.0], [0.0, 0.0]]))
        tensor([[25.,  0.]])
    """
    # the expansion |x|^2 + |z|^2 - 2 x.z is one matmul (fast, exportable); rounding can make it
    # slightly negative, which the clamp removes
    xx = (x * x).sum(-1, keepdim=True)
    zz = (z * z).sum(-1, keepdim=True).transpose(-1, -2)
    return (xx + zz - 2.0 * x @ z.transpose(-1, -2)).clamp_min(0.0)


def rbf(
    x: Tensor, z: Tensor, kappa0: Tensor | float = 1.0, kappa: Tensor | float = 1.0, *, ard: bool = False
) -> Tensor:
    """The Gaussian kernel of eq. (2): ``kappa0 * exp(-1/2 sum_l kappa_l (x_l - z_l)^2)``.

    Args:
        x: ``[..., n, d]``; z: ``[..., m, d]``.
        kappa0: amplitude, a float or a tensor of the batch shape ``[...]``.
        kappa: inverse squared length-scale: a float or ``[...]`` (isotropic), or with ``ard=True``
            ``[..., d]`` (one per feature).

    Returns:
        ``[..., n, m]``. The functional, task-batched form of ``gaussian_kernel(kappa0, kappa)`` (the
        module the scorers hold), used where the parameters differ per task or carry gradients.

    Example:
        >>> x = torch.tensor([[0.0], [1.0]])
        >>> rbf(x, x, 2.0, 4.0)
        tensor([[2.0000, 0.2707],
                [0.2707, 2.0000]])
    """
    kappa = torch.as_tensor(kappa, dtype=x.dtype, device=x.device)
    kappa0 = torch.as_tensor(kappa0, dtype=x.dtype, device=x.device)
    if ard:
        d2 = scaled_squared_distances(x, z, kappa.sqrt().unsqueeze(-2))  # ARD: [..., 1, d]
    else:
        d2 = squared_distances(x, z) * kappa[..., None, None]
    return kappa0[..., None, None] * torch.exp(-0.5 * d2)


def scaled_squared_distances(x: Tensor, z: Tensor, scale: Tensor) -> Tensor:
    """``|s * (x_i - z_j)|^2`` for a per-feature ``scale`` broadcasting against ``x [..., n, d]``."""
    return squared_distances(x * scale, z * scale)


# -- composed kernels (modules: they hold their parameters as buffers, move with .to(), script and export) --
class Kernel(nn.Module):
    """A kernel module ``(x [n, d], z [m, d]) -> [n, m]`` that composes: ``k * c`` (:class:`Scale`),
    ``k1 * k2`` (:class:`Product`), ``k1 + k2`` (:class:`Sum`)."""

    def __mul__(self, other):
        return _compose(self, other, Product)

    __rmul__ = __mul__

    def __add__(self, other):
        return _compose(self, other, Sum)


class RBF(Kernel):
    """The unit-amplitude Gaussian kernel ``exp(-1/2 sum_l kappa_l (x_l - z_l)^2)``: ``[n, d], [m, d] -> [n, m]``.

    ``kappa`` is one inverse squared length-scale (a float or a 0-d tensor) or one per feature (``[d]``:
    ARD). Compose with :class:`Scale`, :class:`Sum`, :class:`Product` (or ``*``, ``+``).

    Example:
        >>> x = torch.tensor([[0.0], [1.0]])
        >>> torch.allclose((2.0 * RBF(4.0))(x, x), rbf(x, x, 2.0, 4.0))
        True
    """

    def __init__(self, kappa: Tensor | float = 1.0) -> None:
        super().__init__()
        self.register_buffer("scale", _parameter(kappa).sqrt())

    def forward(self, x: Tensor, z: Tensor) -> Tensor:
        scale = self.scale.to(dtype=x.dtype, device=x.device)
        return torch.exp(-0.5 * scaled_squared_distances(x, z, scale))


class Scale(Kernel):
    """``kappa0 * base(x, z)``: an amplitude over any kernel module."""

    def __init__(self, base: nn.Module, kappa0: Tensor | float = 1.0) -> None:
        super().__init__()
        self.base = base
        self.register_buffer("kappa0", _parameter(kappa0))

    def forward(self, x: Tensor, z: Tensor) -> Tensor:
        return self.kappa0.to(dtype=x.dtype, device=x.device) * self.base(x, z)


class Sum(Kernel):
    """``sum_i k_i(x, z)`` of kernel modules."""

    def __init__(self, *kernels: nn.Module) -> None:
        super().__init__()
        self.kernels = nn.ModuleList(kernels)

    def forward(self, x: Tensor, z: Tensor) -> Tensor:
        total = torch.zeros(x.shape[:-1] + z.shape[-2:-1], dtype=x.dtype, device=x.device)
        for kernel in self.kernels:
            total = total + kernel(x, z)
        return total


class Product(Kernel):
    """``prod_i k_i(x, z)`` of kernel modules (a product of covariances is one: Schur)."""

    def __init__(self, *kernels: nn.Module) -> None:
        super().__init__()
        self.kernels = nn.ModuleList(kernels)

    def forward(self, x: Tensor, z: Tensor) -> Tensor:
        total = torch.ones(x.shape[:-1] + z.shape[-2:-1], dtype=x.dtype, device=x.device)
        for kernel in self.kernels:
            total = total * kernel(x, z)
        return total


def _parameter(value: Tensor | float) -> Tensor:
    """A kernel parameter as a buffer: a tensor keeps its dtype, a number is float64 (no rounding on the
    way; ``forward`` computes in the inputs' dtype)."""
    if isinstance(value, Tensor):
        return value.detach().clone()
    return torch.tensor(float(value), dtype=torch.float64)


def _compose(kernel: nn.Module, other, kind: type[nn.Module]) -> nn.Module:
    """``kernel * c`` (a number: :class:`Scale`), ``kernel * other`` or ``kernel + other`` (kernel modules)."""
    if isinstance(other, (int, float)) and kind is Product:
        return Scale(kernel, float(other))
    if not isinstance(other, nn.Module):
        return NotImplemented
    return kind(kernel, other)


def gaussian_kernel(kappa0: Tensor | float, kappa: Tensor | float) -> nn.Module:
    """Eq. (2) as a composed kernel: ``Scale(RBF(kappa), kappa0)`` (``kappa`` ``[d]`` for ARD)."""
    return Scale(RBF(kappa), kappa0)


def cholesky_jitter(
    matrix: Tensor, ladder: Sequence[float] = JITTER_LADDER, *, name: str = "matrix"
) -> tuple[Tensor, Tensor]:
    """Cholesky factor of symmetric ``matrix [..., n, n]``, adding jitter where it is not PD.

    Each batch element gets the smallest jitter of ``ladder`` (relative to the mean of its
    diagonal) with which it factors; elements that factor as given are untouched. NaN or inf
    entries, or a matrix indefinite past the last rung, raise ``NotPositiveDefiniteError``: never
    a NaN factor.

    Returns:
        ``(L [..., n, n], jitter [...])``: ``L L^T = matrix + jitter * I``; ``jitter`` is absolute.

    Example:
        >>> a = torch.tensor([[1.0, 1.0], [1.0, 1.0]])  # singular: needs jitter
        >>> low, jitter = cholesky_jitter(a)
        >>> bool(jitter > 0), torch.allclose(low @ low.T, a + jitter * torch.eye(2), atol=1e-6)
        (True, True)
    """
    if not torch.isfinite(matrix).all():
        raise NotPositiveDefiniteError(f"{name} has NaN or inf entries: no Cholesky factor")
    n = matrix.shape[-1]
    batch = matrix.shape[:-2]
    eye = torch.eye(n, dtype=matrix.dtype, device=matrix.device)
    scale = matrix.diagonal(dim1=-2, dim2=-1).abs().mean(-1).clamp_min(torch.finfo(matrix.dtype).tiny)
    factor = torch.zeros_like(matrix)
    jitter = matrix.new_zeros(batch)
    todo = torch.ones(batch, dtype=torch.bool, device=matrix.device)
    for rung in ladder:
        add = rung * scale
        low, info = torch.linalg.cholesky_ex(matrix + add[..., None, None] * eye)
        ok = (info == 0) & todo
        factor = torch.where(ok[..., None, None], low, factor)
        jitter = torch.where(ok, add, jitter)
        todo = todo & ~ok
        if not bool(todo.any()):
            return factor, jitter
    raise NotPositiveDefiniteError(
        f"{name} is not positive definite even with jitter {ladder[-1]:g} x its mean diagonal "
        f"({int(todo.sum())} of {todo.numel()} batch elements)"
    )


def knn_laplacian(x: Tensor, k: int) -> Tensor:
    """Combinatorial Laplacian ``L = D - A`` of the unweighted k-nearest-neighbour graph.

    An edge joins ``i`` and ``j`` when either is among the other's ``k`` nearest neighbours
    (Euclidean), so the graph is undirected (section 2.1 of Chu & Ghahramani).

    Args:
        x: ``[..., n, d]`` the labelled and unlabelled points; k: neighbours per point (``< n``).

    Returns:
        ``[..., n, n]``: ``L_ij = -1`` for an edge, ``L_ii`` = degree, rows sum to 0.

    Example:
        >>> knn_laplacian(torch.tensor([[0.0], [1.0], [5.0]]), 1)
        tensor([[ 1., -1.,  0.],
                [-1.,  2., -1.],
                [ 0., -1.,  1.]])
    """
    n = x.shape[-2]
    if not 1 <= k < n:
        raise ValueError(f"knn_laplacian: k must be in [1, {n - 1}] for {n} points, got {k}")
    d2 = squared_distances(x, x)
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    d2 = d2.masked_fill(eye, float("inf"))  # a point is not its own neighbour
    # stable ordering: equal distances go to the lower index, so the graph is deterministic
    neighbours = torch.sort(d2, dim=-1, stable=True).indices[..., :k]
    adjacency = torch.zeros_like(d2)
    adjacency.scatter_(-1, neighbours, 1.0)
    adjacency = torch.maximum(adjacency, adjacency.transpose(-1, -2))
    return torch.diag_embed(adjacency.sum(-1)) - adjacency


def deformation(gram: Tensor, laplacian: Tensor) -> Tensor:
    """``G = (I + L K)^-1 L`` for the point cloud's Gram ``K [..., n, n]`` and Laplacian ``L``.

    ``G`` is symmetric (push-through identity) and makes the deformed kernel of the
    semi-supervised prior: ``k~(a, b) = k(a, b) - k(a, X) G k(X, b)``, which on the cloud itself is
    ``(K^-1 + L)^-1``, the covariance of eq. (5), and extends it to any point of R^d (Sindhwani,
    Niyogi & Belkin 2005). ``I + L K`` has eigenvalues >= 1 (those of ``L K`` are those of the PSD
    ``K^1/2 L K^1/2``), so the solve is well conditioned even when ``K`` is singular.
    """
    n = gram.shape[-1]
    eye = torch.eye(n, dtype=gram.dtype, device=gram.device)
    g = torch.linalg.solve(eye + laplacian @ gram, laplacian)
    return 0.5 * (g + g.transpose(-1, -2))


class SemiSupervisedKernel:
    """The graph-deformed covariance of Chu & Ghahramani's eq. (5), usable by any GP model here.

    Built from a base kernel (a callable ``(x [..., n, d], z [..., m, d]) -> [..., n, m]``) and the
    labelled + unlabelled points ``cloud [..., N, d]``: a ``neighbours``-NN graph over the cloud gives
    the Laplacian ``L``, and ``self(x, z) = k(x, z) - k(x, cloud) G k(cloud, z)`` with
    ``G = (I + L K)^-1 L``. On the cloud, ``self(cloud, cloud) == (K^-1 + L)^-1``.

    Args:
        base: the base kernel; cloud: ``[..., N, d]``; neighbours: k of the k-NN graph (the paper: 3).
        laplacian: a Laplacian ``[..., N, N]`` to use instead of building the k-NN graph.
        graph_weight: multiplies ``L`` (1 = the paper's eq. (4)).

    Example:
        >>> cloud = torch.linspace(0, 3, 7)[:, None]
        >>> kernel = SemiSupervisedKernel(lambda a, b: rbf(a, b, 1.0, 4.0), cloud, neighbours=2)
        >>> prior = kernel(cloud, cloud)
        >>> K, L = rbf(cloud, cloud, 1.0, 4.0), knn_laplacian(cloud, 2)
        >>> torch.allclose(prior, torch.linalg.inv(torch.linalg.inv(K.double()) + L.double()).float(), atol=1e-4)
        True
    """

    def __init__(
        self,
        base,
        cloud: Tensor,
        *,
        neighbours: int = 3,
        laplacian: Tensor | None = None,
        graph_weight: float = 1.0,
    ) -> None:
        self.base = base
        self.cloud = cloud
        self.laplacian = (knn_laplacian(cloud, neighbours) if laplacian is None else laplacian) * graph_weight
        self.g = deformation(base(cloud, cloud), self.laplacian)

    def __call__(self, x: Tensor, z: Tensor) -> Tensor:
        kx = self.base(x, self.cloud)  # [..., n, N]
        kz = kx.transpose(-1, -2) if z is x else self.base(self.cloud, z)  # [..., N, m]
        return self.base(x, z) - kx @ self.g @ kz

    def expansion(self, items: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
        """A function ``x -> self(x, items) @ alpha`` written over the base kernel: ``(points, weights)``
        with ``self(x, items) @ alpha == base(x, points) @ weights`` for every ``x``.

        ``items [n, d]``, ``alpha [n]``. The points are the items and the cloud; when the items are the
        cloud itself (the same tensor) they merge: ``weights = alpha - G k(cloud, cloud) alpha``. A
        scorer of the base kernel (exportable) therefore serves the deformed posterior mean.
        """
        correction = -(self.g @ (self.base(self.cloud, items) @ alpha))  # the cloud's weights [N]
        if items is self.cloud:
            return items, alpha + correction
        return torch.cat([items, self.cloud]), torch.cat([alpha, correction])
