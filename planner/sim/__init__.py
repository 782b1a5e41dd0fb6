"""Simulated cluster, trace loaders, baselines, the lower bound and offline schedule, backtest reports."""
