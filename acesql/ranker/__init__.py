"""Test-time selection the R3-SQL way: candidates grouped by execution result, groups ranked
by pairwise preference and pointwise utility, judged by the policy model in a ranker role."""
