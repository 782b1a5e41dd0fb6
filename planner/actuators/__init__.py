"""I/O: actuators turn a Decision's replica targets into the cluster (scale subresource, KEDA, HPA, dry-run).

Every actuator is idempotent (no write when already there), safe to retry, and changes replicas only.
"""
