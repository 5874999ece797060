# Benchmarks live outside the default test paths: run them with
#   .venv/bin/python -m pytest bench --benchmark-only
