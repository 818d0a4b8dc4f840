"""The selection settings a user asks for are the ones the evaluation runs: flags -> the
`selection` section -> the result folder's settings -> the options each question is scored
with. Each case here once lived between two homes and was lost on the way."""

import pytest

import acesql.selection.fields as selection_module
from acesql.cli.options import SELECTION_FLAGS, _selection
from acesql.config import EvaluateSection, SelectionSection
from acesql.data.loaders import load_dataset
from acesql.eval.end_to_end import evaluate_examples
from acesql.eval.runner import _options
from acesql.eval.session import settings
from acesql.sql.batch_executor import BatchExecutor
from tests.fakes import Judge, RoleEngine, gold_columns, sql_answer

FLAGS = dict.fromkeys(f for f in SELECTION_FLAGS if f != "selection_params")


@pytest.fixture(scope="module")
def setup(synth_dir, tiny_model_dir):
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompts import PromptBuilder

    examples = load_dataset(synth_dir, "synth", "train").examples[:2]
    return examples, PromptBuilder(load_tokenizer(tiny_model_dir))


@pytest.mark.parametrize("flag", ["resample_ranked", "resample_pool"])  # and its old name
@pytest.mark.parametrize("pool", ["new", "both"])
def test_the_resample_pool_asked_for_is_the_one_ranked(setup, monkeypatch, pool, flag):
    examples, prompts = setup
    # as `acesql eval --selection r3 --candidates 2 --resample --resample-candidates 4
    #      --resample-ranked POOL` (or --resample-pool POOL) parses its flags
    flags = {
        **FLAGS,
        "method": "r3",
        "candidates": 2,
        "resample": True,
        "resample_candidates": 4,
        flag: pool,
    }
    section = _selection("greedy", None, **flags)
    options = _options(
        settings(EvaluateSection(), section, seed=0, reasoning=False, sample_values=0)
    )
    ranked_with = []
    real = selection_module.select_with_resampling

    def spy(*args):
        ranked_with.append(args[-1])
        return real(*args)

    monkeypatch.setattr(selection_module, "select_with_resampling", spy)
    engine = RoleEngine(examples, lambda ex, n, o: [sql_answer("SELECT 12345")] * n, gold_columns)
    with BatchExecutor(workers=0) as executor:
        evaluate_examples(examples, engine, prompts, executor, options, judge=Judge(set()))
    assert ranked_with == [pool] * len(examples)


def test_a_params_file_with_the_old_name_is_read_with_a_warning():
    with pytest.warns(DeprecationWarning, match="now selection.resample_ranked"):
        section = SelectionSection.model_validate({"resample_pool": "both"})
    assert section.resample_ranked == "both"
    with pytest.raises(ValueError, match="give resample_ranked alone"):
        SelectionSection.model_validate({"resample_pool": "both", "resample_ranked": "new"})
