"""Evaluation on the simulated cluster: replay a controller, score it, compare it with the baselines, the lower
bound and the offline schedule, sweep frontiers, write reports."""
