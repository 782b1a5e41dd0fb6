"""Profile requests: model + hardware + workload + SLA in; measured profile, TP per stage, replicas, advice,
a controller policy and deployment manifests out. Run locally (`planner init`), over HTTP (`planner serve`)
or from ``ProfileRequest`` objects in a cluster (`planner serve --watch-namespace`)."""
