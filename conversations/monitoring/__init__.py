"""The operator's view: the monitoring dashboard and its rollups, the run timeline page, the
try-an-agent page, and the broker/worker probes they show."""
