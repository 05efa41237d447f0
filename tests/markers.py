"""Which tests are `slow` beyond what tests/conftest.py's rules find on their own (see docs/development.md).

conftest.py marks, from each test's fixtures and location:
  ray      uses `ray_session` (or a fixture that does), `site_cluster`, or is a parametrization with executor="ray"
           (such a test asks for `ray_session` with request.getfixturevalue), or calls executor="ray" in its body;
  cluster  uses `site_cluster` (a multi-node Ray cluster on this machine);
  service  uses the `service` fixture (a real `raysampler serve`) or `app_client` (the app in-process), or is in a
           module that marks itself (`pytestmark = pytest.mark.service`: it starts its own server or app);
  ui       is under tests/ui (a browser);  deploy  is under tests/deploy;
  slow     any of ray, cluster, ui, or the `service` fixture (a server process) — and everything listed below.

SLOW lists, per test file, the tests that take more than about a second on a 2-core machine (measured with
`python -m pytest -n 0 --durations=0 <dir>`): "*" for the whole module, else test function names (every
parametrization) or single parametrizations "name[id]". tests/test_markers.py checks that every name listed here
still exists, so a rename cannot silently move a slow test into the fast lane.
"""

from __future__ import annotations

ALL = "*"

SLOW: dict[str, str | set[str]] = {
    # the DP mode's exact check: 256 chains × 1,750 rounds with per-row clipped gradients
    "tests/privacy/test_dp_mode.py": {"test_unclipped_dp_chain_matches_the_lyapunov_law"},
    # tests/algorithms: exactness checks against closed-form laws run thousands of rounds
    "tests/algorithms/test_baselines_exact.py": {
        "test_dsghmc_ring_matches_lyapunov_law",
        "test_dsgld_ring_matches_lyapunov_law",
        "test_dula_constant_steps_matches_lyapunov_law",
        "test_mala_targets_exact_posterior",
        "test_ula_matches_lyapunov_law",
    },
    "tests/algorithms/test_bias_budget.py": {
        "test_fald_tuned_default_keeps_the_exact_law_within_budget",
        "test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it[dadmms]",
        # the fast lane under a minute (issue 29): 5-10 s each on a loaded 2-core machine
        "test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it[dsghmc]",
        "test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it[dsgld]",
        "test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it[dula]",
        "test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it[qlsd]",
        "test_tuned_default_keeps_the_exact_law_within_budget_and_samples_it[ula]",
    },
    "tests/algorithms/test_convergence.py": {
        "test_auto_stops_at_the_same_draw_whatever_the_timing",
        "test_auto_stops_once_ess_and_rhat_targets_hold_and_draws_match_the_posterior",
    },
    "tests/algorithms/test_dadmm.py": {"test_dadmms_matches_exact_law"},
    "tests/algorithms/test_defaults.py": ALL,  # 49 s: every algorithm's defaults on two reference posteriors
    "tests/algorithms/test_dglmc_exact.py": {
        "test_default_run_targets_whitened_pi_rho_within_bias_budget",
        "test_lmc_matches_lyapunov_law",
        "test_mala_within_gibbs_targets_pi_rho",
        "test_overrelaxation_autocorrelation_matches_its_prediction",
    },
    "tests/algorithms/test_dmala.py": {
        "test_one_agent_mh_off_matches_exact_ula_law",
        "test_one_agent_exact_mh_samples_posterior_and_old_rule_is_rejected",
        "test_complete_graph_is_exact_mala",
        "test_ring_close_to_posterior_and_old_rule_is_rejected",
        "test_ring_mh_off_matches_exact_law",
    },
    "tests/algorithms/test_fald_exact.py": {
        "test_vr_star_minibatch_shares_the_minibatch",
        "test_draws_match_exact_law",
        "test_minibatch_plain_matches_exact_law_with_gradient_noise",
    },
    "tests/algorithms/test_logistic_reference.py": {
        "test_default_means_and_sds_match_exact_reference",
        "test_default_run_is_converged",
    },
    "tests/algorithms/test_model_priors.py": {
        "test_unknown_noise_and_flat_prior_match_the_normal_inverse_gamma_posterior",  # every sampler: ~60 s together
        "test_default_sampler_matches_the_cached_references",
        "test_flat_prior_on_collinear_columns_is_refused_before_sampling",
        "test_unknown_noise_and_flat_prior_match_the_normal_inverse_gamma_posterior[dadmms]",
        "test_unknown_noise_and_flat_prior_match_the_normal_inverse_gamma_posterior[fald]",
        "test_unknown_noise_and_flat_prior_match_the_normal_inverse_gamma_posterior[dmala]",
    },
    "tests/algorithms/test_qlsd.py": {
        "test_memory_reduces_compression_error",
        "test_uncompressed_qlsd_matches_ula_law",
        "test_compressed_mean_is_posterior_mean",
        "test_pp_variance_reduction_beats_sharp",
    },
    # tests/runtime (the Ray tests are slow by rule)
    "tests/test_checkpoints.py": {
        "test_killed_process_resumes_elsewhere_with_identical_draws",  # a process
        "test_in_memory_shards_must_be_given_again_and_checkpoints_hold_no_data",
    },
    "tests/runtime/test_runtime.py": {
        "test_non_finite_chain_stops_with_worker_and_round_and_keeps_draws",
        "test_time_budget_stops_cleanly_with_draws",
        "test_a_pipelined_run_resumes_exactly_and_needs_independent_chains",
    },
    "tests/runtime/test_batches.py": {"test_batched_shards_draw_bit_for_bit_what_each_draws_alone"},
    # tests/service (the `service` fixture's tests are slow by rule)
    "tests/test_cli.py": {"test_demo_end_to_end"},  # the demo starts a server of its own
    "tests/api/test_openapi_contract.py": {
        "test_operation_keeps_its_contract",  # schemathesis over every operation: about 20 s
        "test_stateful_sequences_keep_the_contract",
    },
    "tests/test_wire.py": {"test_the_sdk_imports_no_server_code"},  # a fresh interpreter
    # tests/deploy and the top level
    "tests/deploy/test_deploy.py": {"test_dockerfile_copies_everything_raysampler_needs_to_install"},  # builds a wheel
    "tests/test_code_quality.py": {"test_mypy_is_clean"},  # about 20 s
    "tests/test_docs.py": {
        "test_every_code_block_of_the_models_doc_works",  # short runs, NumPyro's JIT
        "test_the_readmes_quickstart_runs_as_written",  # a formula run to convergence, ~15 s
        "test_docs_name_only_code_that_exists[docs/architecture.md]",
    },
    "tests/test_shards.py": {"test_covtype_like_full_size"},
    "tests/test_evaluation.py": ALL,  # its module fixtures sample four posteriors (about 10 s)
    # exact LOO by closed form and by grid refits, and arviz-stats' loo on the pooled rows as the oracle (2-5 s)
    "tests/test_moment_match.py": {"test_moment_matching_lands_within_two_mcse_of_exact_loo"},
    "tests/test_stacking.py": {"test_stacking_weights_equal_arviz_stacking_on_the_pooled_pointwise_values"},
    # arviz-stats' own loo on all 569 rows of breast_cancer, the oracle, and the posterior of breast_cancer (2-5 s)
    "tests/test_psis.py": {
        "test_loo_on_breast_cancer_is_finite_and_equals_the_pooled_computation_under_the_same_rule",
        "test_batched_psis_equals_arviz_on_real_log_likelihoods[breast_cancer]",
    },
    "tests/test_imports.py": {
        "test_every_module_imports_on_its_own",  # one fresh interpreter per module
        "test_no_import_cycle_counting_imports_inside_functions",
    },
    "tests/test_ppc.py": {
        "test_every_kind_equals_the_pooled_computation_by_hand[hierarchical]",  # samples a short formula fit
        "test_the_same_seed_gives_the_same_checks_on_one_shard_or_several[hierarchical]",
        "test_each_kind_draws_its_plot",  # imports matplotlib
    },
    "tests/service/test_quotas.py": {  # the fast lane under a minute (issue 29)
        "test_planned_draws_over_the_warning_size_are_warned_in_the_202_and_kept",
    },
    "tests/api/test_routes.py": {  # the fast lane under a minute (issue 29)
        "test_list_filter_paginate_and_delete",
    },
    # tests/models
    "tests/models/test_group_references.py": ALL,  # DG-LMC against NUTS, 16 chains, hundreds of rounds each
    "tests/models/test_families.py": {"test_family_from_a_formula_its_log_likelihood_predictions_and_checks"},
    "tests/models/test_family_references.py": ALL,  # the same for the families brms users fit (issue 48 item 4)
    "tests/models/test_group_effects.py": {
        "test_an_intercept_only_sd_has_no_trailing_dimension",
        "test_hierarchical_linear_matches_the_exact_posterior",
        "test_newton_blocks_leave_the_conditional_of_each_group_invariant",
    },
    "tests/models/test_group_nesting.py": {"test_a_nested_term_equals_the_hand_expanded_model"},
    "tests/models/test_group_spanning.py": {  # DG-LMC runs: the exact posterior (~4 s) and a crossed formula (~2 s)
        "test_a_factor_split_at_random_over_shards_matches_the_exact_posterior",
        "test_a_formula_with_crossed_local_and_spanning_factors_runs",
    },
    "tests/models/test_group_labels.py": {
        "test_already_split_arrays_keep_their_columns_and_text_labels",
        "test_dataframe_labels_shard_by_group_and_predict_by_label",
        "test_text_labels_in_csv_and_parquet_files",
    },
    "tests/models/test_numpyro_bridge.py": {  # NumPyro's JIT compiles each model: 5-30 s each
        "test_logistic_matches_the_builtin_per_shard_with_the_prior_once",
        "test_positive_site_is_sampled_on_the_log_scale_and_reported_natural",
        "test_unit_interval_site_is_sampled_on_the_logit_scale_and_reported_as_a_probability",
        "test_logistic_draws_match_the_builtin",
        "test_import_raysampler_does_not_import_jax",
        "test_sites_are_checked",  # the first JAX import in its process
        "test_pickles_without_compiled_functions_and_keeps_its_repr",
    },
    "tests/service/test_sdk_wait.py": {  # a run resumed in a service of their own: ~15 s each with set-up
        "test_wait_after_a_resume_waits_for_the_resumed_attempt",
        "test_async_wait_after_a_resume_waits_for_the_resumed_attempt",
    },
    "tests/service/test_live_summaries.py": {  # runs that sample in an app of their own: ~15 s together
        "test_an_ended_runs_table_is_made_when_it_ends",
        "test_a_running_runs_page_is_served_its_latest_table_until_a_newer_one_is_due",
    },
    "tests/models/test_registry.py": {"test_a_third_party_family_is_registered_and_broken_ones_are_skipped"},
    "tests/runtime/test_run_state.py": {
        "test_restored_state_continues_with_identical_draws[dsghmc-local]",
        "test_restored_state_continues_with_identical_draws[dadmms-local]",
        "test_restored_state_continues_with_identical_draws[admm-local]",
    },
    "tests/service/test_model_specs.py": {
        "test_a_formula_over_rest_and_a_bad_one_names_the_field",
        "test_group_effects_over_rest",
        "test_correlated_group_effects_over_rest",
        "test_text_group_labels_from_an_upload_name_the_effects",
    },
    "tests/models/test_formula.py": {
        "test_text_categories_and_group_labels_from_parquet_files",
        "test_a_formula_model_equals_the_hand_built_design",
        "test_the_formula_path_gives_the_group_reference_models_exactly",
        "test_fixef_ranef_coef_and_prior_summary_read_the_draws_as_brms_does",
    },
    "tests/models/test_model_runs.py": {
        "test_meta_analysis_with_known_per_row_noise_matches_the_exact_posterior",
        "test_a_users_own_model_plugs_in",
        "test_linear_regression_on_diabetes_matches_exact_pi_rho",
        "test_every_family_samples[softmax_regression-digits]",
        "test_every_family_samples[mlp_classifier-digits]",
    },
}


def is_listed_slow(relpath: str, name: str, originalname: str) -> bool:
    """Whether SLOW lists this test (its file relative to the repository root, its name with the parametrization
    id, and the function's name)."""
    entry = SLOW.get(relpath)
    if entry is None:
        return False
    if entry == ALL:
        return True
    return name in entry or originalname in entry
