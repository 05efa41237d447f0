"""Yardsticks for the tests and benchmarks, not used by the sampler at run time: exact laws and closed-form posteriors
of Gaussian and linear-regression problems (`exact`)."""
