"""Test-time selection: which answer a question gets among those the model wrote.

`answer`: the product's answer, the pipeline's or the full schema's, by a policy chosen on a
dev split (`acesql.selection.answer`).
"""
