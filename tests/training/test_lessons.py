"""Each lesson's configuration lives in one place (``course_lib.training.lessons``): ``course-train``'s tasks, the
benchmarks and the notebooks read it, none restates it."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import nbformat
import pytest

from course_lib.models.bert import BERT
from course_lib.models.gpt import GPT
from course_lib.models.llama import Llama
from course_lib.models.vit import VisionTransformer
from course_lib.training.cli.config import load_config
from course_lib.training.cli.tasks import COMMON_QUICK, NOTEBOOK_MODELS, TASKS
from course_lib.training.lessons import LESSON_07, LESSON_08, LESSON_11, LESSON_12, LESSON_14, LESSON_15, LESSONS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

# The names a lesson's notebook gives its configuration: each must be read from the lesson, never typed again.
CONFIG_NAMES = {"CONFIG", "VIT_CONFIG", "TRAIN", "RECIPE", "SEQ_LEN", "VOCAB_SIZE", "BATCH", "TRAIN_STEPS",
                "PRETRAIN_STEPS", "VIT_STEPS", "PER_CLASS", "FINETUNE_STEPS", "FINETUNE_LR"}


@pytest.mark.parametrize("lesson", LESSONS.values(), ids=LESSONS)
def test_course_train_task_defaults_are_the_lessons_values(lesson) -> None:
    """``course-train TASK`` (defaults and --quick, through the configuration loader) runs the lesson's model and
    recipe; ``--list`` names the task for the lesson's notebook."""
    defaults, quick = load_config(lesson.task), load_config(lesson.task, quick=True)
    assert defaults["steps"] == lesson.steps
    for key, value in {**lesson.model, **lesson.train}.items():
        assert (key, defaults[key]) == (key, value) and type(defaults[key]) is type(value)
    assert TASKS[lesson.task].quick == {**COMMON_QUICK, **lesson.quick}
    assert all(quick[key] == value for key, value in {**COMMON_QUICK, **lesson.quick}.items())
    assert f"course-train {lesson.task}" in NOTEBOOK_MODELS[lesson.notebook]


@pytest.mark.parametrize(("lesson", "model_class"), [(LESSON_08, VisionTransformer), (LESSON_11, GPT),
                                                     (LESSON_12, BERT), (LESSON_14, Llama)])
def test_every_model_key_is_an_argument_of_the_lessons_model(lesson, model_class) -> None:
    assert set(lesson.model) <= set(inspect.signature(model_class).parameters)


def test_lessons_are_frozen_and_notebook_15_trains_notebook_14s_model() -> None:
    with pytest.raises(TypeError):
        LESSON_07.model["d_model"] = 256  # a consumer that changes its copy cannot change the others'
    assert (LESSON_15.model, LESSON_15.train, LESSON_15.steps, LESSON_15.task) == (
        LESSON_14.model, LESSON_14.train, LESSON_14.steps, LESSON_14.task)


def test_benchmarks_read_the_lessons() -> None:
    import bench_bert
    import bench_lm
    import bench_lm_crossover
    import bench_translation
    import bench_vit

    assert bench_translation.CONFIG == {**LESSON_07.model, **LESSON_07.train}
    assert bench_translation.STEPS == LESSON_07.steps
    assert bench_vit.VIT_CONFIG == LESSON_08.model
    assert bench_vit.TRAIN == {**LESSON_08.train, "eval_every": 100}
    assert (bench_lm.CONFIG, bench_lm.SEQ_LEN, bench_lm.VOCAB_SIZE) == (
        LESSON_11.model, LESSON_11.train["seq_len"], LESSON_11.train["vocab_size"])
    assert bench_lm.TRAIN.items() <= LESSON_11.train.items()
    assert (bench_lm_crossover.CONFIG, bench_lm_crossover.TRAIN) == (bench_lm.CONFIG, bench_lm.TRAIN)
    assert bench_bert.CONFIG == LESSON_12.model


def test_no_benchmark_restates_a_lessons_model() -> None:
    """A model width typed as a number in a benchmark is a second copy (bench_attention and the throughput
    benchmark size their own models, not a lesson's)."""
    own_models = {"bench_attention.py", "bench_training_throughput.py"}
    restated = [path.name for path in sorted((ROOT / "benchmarks").glob("bench_*.py"))
                if path.name not in own_models and re.search(r"\bd_model=\d", path.read_text(encoding="utf-8"))]
    assert restated == []


def _config_assignments(notebook: str) -> list[tuple[set[str], set[str]]]:
    """(targets among CONFIG_NAMES or any, names read) of every assignment in the notebook's code, in order."""
    found = []
    for cell in nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assign):
                targets = {name.id for target in node.targets for name in ast.walk(target)
                           if isinstance(name, ast.Name) and isinstance(target, (ast.Name, ast.Tuple))}
                read = {name.id for name in ast.walk(node.value) if isinstance(name, ast.Name)}
                found.append((targets, read))
    return found


@pytest.mark.parametrize("lesson", LESSONS.values(), ids=LESSONS)
def test_notebook_reads_its_configuration_from_its_lesson(lesson) -> None:
    """Every assignment of a configuration name in the notebook is computed from ``LESSON_NN`` (directly, or from a
    name computed from it): a number typed again fails here."""
    lesson_name = next(name for name, value in vars(sys.modules[LESSON_07.__module__]).items() if value is lesson)
    derived, assigned = {lesson_name}, set()
    for targets, read in _config_assignments(lesson.notebook):
        if read & derived:
            derived |= targets
        watched = targets & CONFIG_NAMES
        assigned |= watched
        assert not watched or read & derived, f"{lesson.notebook}: {sorted(watched)} not read from {lesson_name}"
    assert assigned & {"CONFIG", "VIT_CONFIG"}, f"{lesson.notebook} names no configuration"
