"""Runs the procrastinate benchmark (see procrastinate_bench.py).

procrastinate warns when its App is built in the ``__main__`` module, so the
benchmark lives in a module of its own and this file only calls it.
"""

import procrastinate_bench

procrastinate_bench.cli()
