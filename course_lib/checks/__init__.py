"""The course's autograded checks: one module per notebook, named after it (``nb00_welcome``, ``nb01_attention``, ...).

Each module declares its notebook's exercises with :func:`course_lib.exercises.register`; the notebook's
metadata names that module (``"course": {"checks": "course_lib.checks.nb00_welcome"}``). Notebooks call::

    from course_lib.checks import check
    softmax_fn = check("stable_softmax")   # checks the function `stable_softmax` defined above

:data:`EXERCISES` says which module declares which exercise: the exercise mechanism looks a name up there and
imports that one module (this package adds itself to the mechanism when it is imported: the mechanism never
imports the checks). ``tests/checks/test_exercises.py`` keeps the table equal to what the modules register and to the
notebooks' exercise cells.

Why the modules look alike (``duplicates`` lists many pairs of them, all by shape): they are declarations, not code.
Each exercise is one ``Exercise(name=..., reference=..., mistakes=[...], also_correct=[...])`` with its own data,
and each known mistake (a mutant) is a whole wrong answer written the way a learner writes it, not a parameter of a
shared generator: a mutant must read as the mistake its hint names, and two that differ in one axis or one operand
are two different mistakes with two different hints. What their cases share lives once, in
:mod:`course_lib.exercises.cases` (``public_and_hidden``, random inputs).
"""

from course_lib.exercises import add_exercise_package, check, check_earlier, run_check

#: ``{checks module: the exercises it declares}``, in the order of the notebooks' exercise cells.
EXERCISES: dict[str, tuple[str, ...]] = {
    "nb00_welcome": ("stable_softmax",),
    "nb01_attention": ("scaled_dot_product_attention",),
    "nb02_multi_head_attention": ("split_heads", "merge_heads", "multi_head_attention"),
    "nb03_positional_encoding": ("sinusoidal_table",),
    "nb04_masking": ("padding_mask", "causal_mask"),
    "nb05_encoder": ("feed_forward", "encoder_layer", "mean_pool"),
    "nb06_decoder": ("decoder_layer", "shift_right"),
    "nb07_training_and_decoding": ("label_smoothed_cross_entropy", "beam_search_step", "transformer_lr"),
    "nb08_vision_transformer": ("patchify", "add_cls_and_positions"),
    "nb09_why_self_attention": ("layer_flops", "max_path_length", "additive_attention"),
    "nb10_tokeniser_and_training_loop": ("bpe_merge_step", "adamw_update", "clip_by_global_norm"),
    "nb11_language_model": ("lm_loss", "attend_with_cache", "top_p_filter"),
    "nb12_bert": ("mask_tokens", "mlm_loss", "classification_head"),
    "nb13_paper_experiments": ("average_weights",),
    "nb14_todays_models": ("apply_rope", "rms_norm", "swiglu"),
    "nb15_inference_at_scale": ("repeat_kv", "online_softmax"),
}

add_exercise_package(__name__)  # the mechanism finds this package's exercises by the table above



__all__ = ["check", "check_earlier", "run_check", "EXERCISES"]
