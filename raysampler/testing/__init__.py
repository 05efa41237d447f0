"""Yardsticks, not used by the sampler at run time: exact laws and closed-form posteriors of Gaussian and
linear-regression problems (`exact`).

They ship in the package, not under tests/, because more than the tests compare against them: the seed papers'
benchmarks (benchmarks/papers/seed000_toy.py, seed003_linear_w2.py) and users checking a model of their own
(docs/models.md, "Exact answers for tests"; LinearRegression's flat-prior message points there). No module of the
sampler imports them (tests/test_packaging.py)."""
