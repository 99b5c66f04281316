"""What a task fills in where the user gives nothing: a --preset's model and sizes, and the
language model's training recipe (a budget, with the lr and warm-up tuned for it), each only
where no value of the user's own stands, and refused in one line where it cannot apply."""

from __future__ import annotations

import pytest

from conftest import needs, parbench, run_ok
from parbench.base.errors import UsageError
from parbench.contract.tasks import ImageClassification, LanguageModeling
from parbench.launch.options import RunConfig


def sizes(cfg: RunConfig) -> tuple:
    return cfg.model, cfg.width, cfg.depth, cfg.heads, cfg.optimizer


def test_a_preset_fills_in_the_tasks_model_and_sizes_where_none_is_given():
    images, language = (task.presets["medium"] for task in (ImageClassification,
                                                             LanguageModeling))
    assert sizes(RunConfig.of(preset="medium")) == (
        "vit", images["width"], images["depth"], images["heads"], "adamw")
    assert sizes(RunConfig.of(model="gpt", preset="medium")) == (
        "gpt", language["width"], language["depth"], language["heads"], "adamw")
    given = RunConfig.of(model="vit", preset="medium", width=256, optimizer="sgd")
    assert (given.width, given.optimizer) == (256, "sgd")  # the user's values stand


@pytest.mark.parametrize("values,message", [
    ({"model": "resnet", "preset": "medium"}, "--preset medium of image-classification trains "
     "--model vit, not --model resnet; leave --model out or give vit"),
    ({"preset": "large"}, "--preset large: image-classification has no such preset; its "
     "presets: medium, vit-b16, resnet50"),
])
def test_a_preset_that_cannot_apply_is_refused(values, message):
    with pytest.raises(UsageError) as refused:
        RunConfig.of(**values)
    assert str(refused.value) == message


def test_the_language_models_recipe_applies_only_without_a_budget_of_the_users():
    recipe = LanguageModeling.recipe
    plain = RunConfig.of(model="gpt")
    assert (plain.epochs, plain.lr, plain.warmup_steps) == (
        recipe["epochs"], recipe["lr"], recipe["warmup_steps"])
    own_budget = RunConfig.of(model="gpt", steps=10)
    assert (own_budget.epochs, own_budget.lr, own_budget.warmup_steps) == (None, None, 0)
    own_lr = RunConfig.of(model="gpt", lr=0.003)
    assert (own_lr.epochs, own_lr.lr, own_lr.warmup_steps) == (recipe["epochs"], 0.003,
                                                                recipe["warmup_steps"])
    # the lr and warm-up were tuned for AdamW: another optimizer keeps its own
    sgd = RunConfig.of(model="gpt", optimizer="sgd")
    assert (sgd.epochs, sgd.lr, sgd.warmup_steps) == (recipe["epochs"], None, 0)
    images = RunConfig.of()
    assert (images.epochs, images.lr, images.warmup_steps) == (None, None, 0)


def test_a_refused_preset_is_one_line_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "runs"
    done = parbench("run", "torch-single", "--model", "mlp", "--preset", "medium", "--out",
                    str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip() == ("parbench: error: --preset medium of image-classification "
                                   "trains --model vit, not --model mlp; leave --model out or "
                                   "give vit")


@pytest.mark.slow
@needs("torch")
def test_the_record_says_its_preset_and_trains_its_sizes(tmp_path):
    record = run_ok(tmp_path, "torch-single", "--preset", "medium", "--steps", "1",
                    "--global-batch", "8")
    preset = ImageClassification.presets["medium"]
    assert record["model"] == "vit" and record["config"]["preset"] == "medium"
    assert {k: record["config"][k] for k in ("width", "depth", "heads")} == {
        k: preset[k] for k in ("width", "depth", "heads")}
    # the spec trained is the preset's: its FLOPs per step grow with the width squared
    (tmp_path / "default").mkdir()
    default = run_ok(tmp_path / "default", "torch-single", "--model", "vit", "--steps", "1",
                     "--global-batch", "8", "--optimizer", "adamw")
    assert record["metrics"]["flops"]["per_step"] > 4 * default["metrics"]["flops"]["per_step"]
