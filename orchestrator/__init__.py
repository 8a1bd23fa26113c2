"""ParaTune: tune the parallelism and sharding of LLM training with real trials.

Flow (one module per stage): spec -> search_spaces -> searchers -> costmodel -> controller ->
backends -> jobs -> tracking -> dashboards / export. See the README for the CLI.
"""

__version__ = "0.1.0"
