"""A multi-turn SQL-as-action agent: the model runs SQL on its own replica, reads what came
back, and submits an answer; for debugging tasks and for text-to-SQL questions."""
