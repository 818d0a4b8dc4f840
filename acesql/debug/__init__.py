"""SQL debugging tasks: a user's issue and broken SQL, fixed SQL judged by execution."""
