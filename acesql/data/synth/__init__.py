"""The built-in SynSQL-style generator of databases, questions and gold SQL."""
