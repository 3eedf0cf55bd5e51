"""A training step of a K-network ensemble: stacked members (``MLPScorer(members=K)``) vs a loop.

    python -m bench.ensemble_scorer                          # CPU, and CUDA when present
    python -m bench.ensemble_scorer --device cpu --members 5 10 --widths 300 9600

One step = the members' scores of a batch, RankNet's loss per member and the backward pass, on
``--lists`` lists of ``--length`` documents. The reference, timed in the same run, is what
``MLPScorer`` held before: K separate ``nn.Sequential`` networks, evaluated one after the other
(built from the same seed, so both start as the same model: the bench checks their scores agree).
Widths: 300 (letor_a's raw features) and 9,600 (its quantile-threshold inputs, the default of every
network on LETOR data). Network: the ranker config's ``[128, 64]``, layer norm, ReLU, dropout 0.1.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from bench.timing import machine, median_ms
from losses import ranknet_loss
from rankers.scorers import MLPScorer

HIDDEN = (128, 64)


def looped_networks(n_features: int, members: int, dropout: float) -> nn.ModuleList:
    """The reference: K separate networks of the scorer's shape."""
    networks = []
    for _ in range(members):
        layers: list[nn.Module] = []
        width = n_features
        for size in HIDDEN:
            layers += [nn.Linear(width, size), nn.LayerNorm(size), nn.ReLU(), nn.Dropout(dropout)]
            width = size
        networks.append(nn.Sequential(*layers, nn.Linear(width, 1)))
    return nn.ModuleList(networks)


def step(score_members, features: torch.Tensor, labels: torch.Tensor) -> None:
    members = score_members(features)  # [B, L, K]
    loss = ranknet_loss(members.movedim(-1, 0).flatten(0, 1), labels.repeat(members.shape[-1], 1))
    loss.backward()


def row(device: torch.device, members: int, width: int, lists: int, length: int, repeats: int) -> str:
    torch.manual_seed(0)
    reference = looped_networks(width, members, 0.1).to(device).eval()
    torch.manual_seed(0)
    stacked = MLPScorer(width, HIDDEN, members=members, norm="layer", dropout=0.1).to(device).eval()
    features = torch.randn(lists, length, width, device=device)
    labels = torch.randint(0, 5, (lists, length), device=device).float()

    def loop(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([network(x) for network in reference], -1)

    with torch.no_grad():  # same model (eval: no dropout), so the timing compares like with like
        torch.testing.assert_close(stacked.member_scores(features), loop(features), rtol=1e-4, atol=1e-4)
    reference.train(), stacked.train()
    looped_ms = median_ms(lambda: step(loop, features, labels), device, repeats=repeats)
    stacked_ms = median_ms(lambda: step(stacked.member_scores, features, labels), device, repeats=repeats)
    return (
        f"| {device.type} | {members} | {width} | [{lists}, {length}] | {looped_ms:.1f} | {stacked_ms:.1f} "
        f"| {looped_ms / stacked_ms:.2f}x |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], action="append")
    parser.add_argument("--members", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--widths", type=int, nargs="+", default=[300, 9600])
    parser.add_argument("--lists", type=int, default=32)
    parser.add_argument("--length", type=int, default=16, help="letor_a's lists hold 15 documents on average")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    print(machine())
    print("| device | members | input width | batch [B, L] | loop ms/step | stacked ms/step | speed-up |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name in devices:
        for members in args.members:
            for width in args.widths:
                print(row(torch.device(name), members, width, args.lists, args.length, args.repeats), flush=True)


if __name__ == "__main__":
    main()
