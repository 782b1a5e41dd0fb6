"""Simulated cluster, trace loaders, baselines, oracle and backtest reports."""
