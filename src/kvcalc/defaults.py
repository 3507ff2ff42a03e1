"""The workload every command and API call assumes when none is given, in one place: a sequence
of ``DEFAULT_TOKENS`` tokens (prompt + generated). Each use says so in a note."""

# 2,048 tokens: estimate's and compare's default since the start, and a context every model in
# the presets holds; fit (4,096) and probe (512) used their own until issue 37.
DEFAULT_TOKENS = 2048
