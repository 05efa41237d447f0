"""What the tests share and are not tests: problems with exact answers (`problems`, `reference_problems`,
`loo_problems`, `hier_oracle`), Monte-Carlo tolerances (`stats_helpers`), real servers on 127.0.0.1 (`servers`) and
helpers for the service's tests (`service_helpers`), the suite's local Ray (`ray_head`), the slow-lane list
(`markers`) and the slow-link harness (`wan_harness`). tests/ is on sys.path (pytest puts a conftest's folder
there), so tests import them as `support.<module>`."""
