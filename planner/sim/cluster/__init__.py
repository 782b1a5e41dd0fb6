"""The discrete-event simulated cluster and the MetricSource and Actuator a controller sees it through."""
