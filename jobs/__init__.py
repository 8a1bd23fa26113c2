"""Trial programs that run on the cluster. They import only torch and orchestrator.result."""
