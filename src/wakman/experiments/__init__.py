"""Experiments: reproduction of the paper's results, sweeps and plots."""
