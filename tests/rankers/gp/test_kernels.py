"""rankers.gp.kernels against scikit-learn (RBF and its sums/products, k-NN graph) and dense inverses
(the deformed prior)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.neighbors import kneighbors_graph

from rankers.gp import RBF as Gaussian
from rankers.gp import (
    NotPositiveDefiniteError,
    SemiSupervisedKernel,
    cholesky_jitter,
    gaussian_kernel,
    knn_laplacian,
    rbf,
)

F64 = torch.float64


def test_rbf_is_sklearns_isotropic_ard_and_batched():
    g = torch.Generator().manual_seed(0)
    x, z = torch.randn(3, 7, 4, generator=g, dtype=F64), torch.randn(3, 5, 4, generator=g, dtype=F64)
    kappa = torch.tensor([0.5, 2.0, 4.0], dtype=F64)
    kappa0 = torch.tensor([1.0, 0.25, 3.0], dtype=F64)
    batched = rbf(x, z, kappa0, kappa)
    for t in range(3):
        ref = kappa0[t].item() * RBF(length_scale=1 / kappa[t].sqrt().item())(x[t].numpy(), z[t].numpy())
        np.testing.assert_allclose(batched[t].numpy(), ref, rtol=1e-12)
    ard = torch.tensor([0.1, 1.0, 3.0, 0.0], dtype=F64)  # a 0 weight ignores the feature
    ref = RBF(length_scale=1 / np.sqrt(ard.numpy()[:3]))(x[0, :, :3].numpy(), z[0, :, :3].numpy())
    np.testing.assert_allclose(rbf(x[0], z[0], 1.0, ard, ard=True).numpy(), ref, rtol=1e-10)


def test_knn_laplacian_is_sklearns_symmetrized_graph():
    x = torch.randn(30, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    adjacency = kneighbors_graph(x.numpy(), 3, mode="connectivity").toarray()
    adjacency = np.maximum(adjacency, adjacency.T)
    expected = np.diag(adjacency.sum(1)) - adjacency
    np.testing.assert_array_equal(knn_laplacian(x, 3).numpy(), expected)
    with pytest.raises(ValueError, match="k must be"):
        knn_laplacian(x, 30)


def test_the_deformed_prior_is_eq5_on_the_cloud_and_a_kernel_off_it():
    g = torch.Generator().manual_seed(2)
    cloud = torch.randn(25, 2, generator=g, dtype=F64)

    def base(a, b):
        return rbf(a, b, 0.25, 4.0)

    kernel = SemiSupervisedKernel(base, cloud, neighbours=3)
    k, lap = base(cloud, cloud).numpy(), knn_laplacian(cloud, 3).numpy()
    eq5 = np.linalg.inv(np.linalg.inv(k + 1e-10 * np.eye(25)) + lap)
    np.testing.assert_allclose(kernel(cloud, cloud).numpy(), eq5, atol=1e-7)
    # off the cloud: adding the new points to the cloud as isolated vertices (no edges) gives the
    # same covariance, since L then has zero rows for them
    new = torch.randn(4, 2, generator=g, dtype=F64)
    both = torch.cat([cloud, new])
    lap_both = np.zeros((29, 29))
    lap_both[:25, :25] = lap
    k_both = base(both, both).numpy()
    ref = np.linalg.inv(np.linalg.inv(k_both + 1e-10 * np.eye(29)) + lap_both)
    np.testing.assert_allclose(kernel(both, both).numpy(), ref, atol=1e-6)
    assert np.linalg.eigvalsh(kernel(both, both).numpy()).min() > -1e-10


def test_the_jitter_ladder_per_batch_element():
    good = torch.eye(3)
    singular = torch.ones(3, 3)
    low, jitter = cholesky_jitter(torch.stack([good, singular]))
    assert float(jitter[0]) == 0.0 and float(jitter[1]) > 0.0
    torch.testing.assert_close(low[0], good)
    assert torch.isfinite(low).all()
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        cholesky_jitter(torch.tensor([[1.0, 3.0], [3.0, 1.0]]))
    with pytest.raises(NotPositiveDefiniteError, match="NaN"):
        cholesky_jitter(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))


def test_composed_kernels_are_sklearns_sums_and_products_and_export():
    g = torch.Generator().manual_seed(3)
    x, z = torch.randn(6, 3, generator=g, dtype=F64), torch.randn(4, 3, generator=g, dtype=F64)
    ours = Gaussian(2.0) * Gaussian(torch.tensor([0.5, 1.0, 3.0], dtype=F64)) + 0.3 * Gaussian(0.25)
    ard = RBF(length_scale=1 / np.sqrt([0.5, 1.0, 3.0]))
    reference = RBF(1 / np.sqrt(2.0)) * ard + ConstantKernel(0.3) * RBF(1 / np.sqrt(0.25))
    np.testing.assert_allclose(ours(x, z).numpy(), reference(x.numpy(), z.numpy()), rtol=1e-12)
    np.testing.assert_allclose(gaussian_kernel(0.7, 2.0)(x, z).numpy(), rbf(x, z, 0.7, 2.0).numpy(), rtol=1e-12)
    # float32 modules script and export to ONNX (the scorers hold one)
    module = ours.float()
    scripted = torch.jit.script(module)
    torch.testing.assert_close(scripted(x.float(), z.float()), module(x.float(), z.float()))
    onnx = pytest.importorskip("onnxruntime")
    import io

    buffer = io.BytesIO()
    torch.onnx.export(module, (x.float(), z.float()), buffer, input_names=["x", "z"], dynamo=False)
    session = onnx.InferenceSession(buffer.getvalue())
    (got,) = session.run(None, {"x": x.float().numpy(), "z": z.float().numpy()})
    np.testing.assert_allclose(got, module(x.float(), z.float()).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("same", [True, False])
def test_the_deformed_posterior_mean_written_over_the_base_kernel(same):
    g = torch.Generator().manual_seed(4)
    cloud = torch.randn(20, 2, generator=g, dtype=F64)
    kernel = SemiSupervisedKernel(gaussian_kernel(0.5, 2.0), cloud, neighbours=3)
    items = cloud if same else torch.randn(7, 2, generator=g, dtype=F64)
    alpha = torch.randn(len(items), generator=g, dtype=F64)
    points, weights = kernel.expansion(items, alpha)
    new = torch.randn(9, 2, generator=g, dtype=F64)
    torch.testing.assert_close(kernel.base(new, points) @ weights, kernel(new, items) @ alpha)
