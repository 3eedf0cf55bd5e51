"""Learning to rank from click logs: propensity estimation (regression EM, intervention harvesting),
the unbiased ranker (``model=unbiased``: naive, IPS, DLA). See docs/clicks.md."""

from rankers.clicks.propensity import PropensityEstimate, em_propensities, harvest_propensities

__all__ = ["PropensityEstimate", "em_propensities", "harvest_propensities"]
