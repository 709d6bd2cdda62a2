"""An explorer for the course's own trained models: attention, the next-token choice, and positions.

A lesson opens it in one line on the model it has just trained (``explore_translation(model, ...)`` in notebook
07, ``explore_gpt_attention`` and ``explore_generation`` in notebook 11, ``explore_heads`` for notebook 02's heads
and notebook 14's grouped heads, ``explore_positions`` for notebooks 03 and 14). The model runs **once per input**,
here in Python; every hover and slider is then answered in the browser from that data (no round trip), so an
update costs one redraw.

The view is an `anywidget <https://anywidget.dev>`_ widget (JupyterLab, VS Code and Colab) whose JavaScript,
``explorer.js``, ships inside this package: nothing is fetched. The same widget also carries a static twin as HTML
(the same JavaScript inlined, the data beside it), which the course's website shows, and a plain-text line
where no front end is attached (a headless run), where the lesson's static figure stays the reference.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from importlib import resources

import anywidget
import torch
import traitlets

__all__ = ["Explorer", "attention_input", "explore_heads", "explore_translation", "explore_gpt_attention",
           "explore_generation", "explore_positions", "static_html"]

DIGITS = 4  # weights and logits are rounded: the view shows 3 decimals, and the data stays small


def _script() -> str:
    return resources.files("course_lib.figures").joinpath("explorer.js").read_text(encoding="utf-8")


def _plain(x: torch.Tensor) -> list:
    """A tensor as nested lists of rounded floats (JSON)."""
    return torch.round(x.detach().to("cpu", torch.float64), decimals=DIGITS).tolist()


def static_html(data: dict) -> str:
    """A self-contained HTML fragment that draws ``data`` with the explorer's JavaScript (the website's view)."""
    target = f"course-explorer-{uuid.uuid4().hex[:12]}"
    payload = json.dumps(data).replace("</", "<\\/")  # never closes the script element early
    return (f'<div id="{target}" class="course-explorer"></div>\n<script type="module">\n{_script()}\n'
            f'renderStatic(document.getElementById("{target}"), {payload});\n</script>')


class Explorer(anywidget.AnyWidget):
    """The explorer's widget: ``data`` is one view (``kind`` "attention", "generation" or "positions").

    With ``recompute`` (a function text -> data), the view offers a text box: what the learner types is run
    through the model (once) and the view redrawn.
    """

    _esm = _script()
    data = traitlets.Dict().tag(sync=True)
    live = traitlets.Bool(False).tag(sync=True)
    query = traitlets.Unicode("").tag(sync=True)

    def __init__(self, data: dict, recompute: Callable[[str], dict] | None = None) -> None:
        super().__init__(data=data, live=recompute is not None)
        self._recompute = recompute
        if recompute is not None:
            self.observe(self._on_query, names="query")

    def _on_query(self, change: dict) -> None:
        self.data = self._recompute(change["new"])

    def _repr_mimebundle_(self, **kwargs: object) -> tuple[dict, dict] | dict:
        bundle = super()._repr_mimebundle_(**kwargs)
        data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = {**data, "text/html": static_html(self.data),
                "text/plain": f"course explorer ({self.data.get('kind')}): open in JupyterLab, VS Code or Colab"}
        return data, meta


def attention_input(label: str, query_tokens: Sequence[str], key_tokens: Sequence[str],
                    layers: Sequence[torch.Tensor], text: str = "") -> dict:
    """One input of an attention view: ``layers`` holds one (heads, seq_q, seq_k) tensor per layer (a leading
    batch axis of 1 is dropped); row ``i`` of a head is where query ``i`` looks."""
    weights = []
    for i, w in enumerate(layers):
        w = w[0] if w.dim() == 4 else w
        if w.dim() != 3 or w.shape[-2:] != (len(query_tokens), len(key_tokens)):
            raise ValueError(f"attention_input: layers[{i}] must have shape (heads, {len(query_tokens)}, "
                             f"{len(key_tokens)}) (queries x keys), got {tuple(w.shape)}")
        weights.append(_plain(w))
    return {"label": label, "text": text, "query_tokens": list(query_tokens), "key_tokens": list(key_tokens),
            "layers": weights}


def explore_heads(inputs: Sequence[dict], note: str = "", groups: Sequence[int] | None = None,
                  recompute: Callable[[str], dict] | None = None, query_label: str | None = None,
                  key_label: str | None = None) -> Explorer:
    """An attention view over :func:`attention_input` entries; ``groups[h]`` names the key/value head that query
    head ``h`` reads (grouped-query attention)."""
    if not inputs:
        raise ValueError("explore_heads: inputs is empty (expected at least one attention_input(...))")
    data = {"kind": "attention", "inputs": list(inputs), "note": note, "editable": recompute is not None,
            "groups": list(groups) if groups is not None else None}
    if query_label:
        data["query_label"] = query_label
    if key_label:
        data["key_label"] = key_label

    def again(text: str) -> dict:
        return {**data, "inputs": [recompute(text), *inputs]}

    return Explorer(data, again if recompute is not None else None)


@torch.no_grad()
def explore_translation(model: torch.nn.Module, sentences: Sequence[str], src_tokenizer, src_vocab, tgt_vocab,
                        max_len: int = 40) -> Explorer:
    """Notebook 07's translator: for each English sentence, the German pieces it writes (greedy) and, per layer
    and head, where each piece's prediction looked in the English (cross-attention). Type a sentence to add it."""
    from course_lib.generation.decoding import greedy_decode  # (generation imports models, not figures)

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()

    def one(sentence: str) -> dict:
        src_tokens = src_tokenizer.tokenize(sentence)
        src = torch.tensor([src_vocab.encode(src_tokens)], device=device)
        pieces = tgt_vocab.decode(greedy_decode(model, src, max_len=max_len)[0].tolist())
        tgt_in = torch.tensor([[tgt_vocab.bos_id] + tgt_vocab.encode(pieces)], device=device)
        # Row t of tgt_in (<bos> + pieces) predicted piece t; its last row predicted the end of the sentence.
        layers = [w[0] for w in model.cross_attention_weights(src, tgt_in)]  # (heads, pieces + 1, src)
        return attention_input(sentence, [*pieces, "<eos>"], src_tokens, layers, text=sentence)

    try:
        inputs = [one(s) for s in sentences]
    finally:
        model.train(was_training)
    return explore_heads(inputs, note="Hover a German piece: where its prediction read the English. Hover an English "
                        "word: which pieces read it.", recompute=one, query_label="German pieces (hover: where "
                        "each read)", key_label="English words (hover: which pieces read it)")


@torch.no_grad()
def explore_gpt_attention(model: torch.nn.Module, bpe, prompts: Sequence[str]) -> Explorer:
    """Notebook 11's GPT: each block's causal self-attention over a prompt's pieces, per head."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()

    def one(prompt: str) -> dict:
        ids = bpe.encode(prompt)
        if not ids:
            raise ValueError("explore_gpt_attention: a prompt is empty after tokenisation")
        tokens = torch.tensor([ids], device=device)
        pieces = [bpe.decode([i]) for i in ids]
        return attention_input(prompt, pieces, pieces, model.attention_weights(tokens), text=prompt)

    try:
        inputs = [one(p) for p in prompts]
    finally:
        model.train(was_training)
    return explore_heads(inputs, note="Hover a piece: where it looks (only back: the mask is causal).",
                         recompute=one)


@torch.no_grad()
def explore_generation(model: torch.nn.Module, bpe, prompt: str, steps: int = 20, temperature: float = 1.0,
                       top_k: int = 0, top_p: float = 1.0, bars: int = 20, seed: int = 0) -> Explorer:
    """Notebook 11's generation, step by step: the next-token logits after each prefix, drawn as probabilities
    under the temperature, top-k and top-p of the sliders (filtered tokens greyed), with the model's choice.

    The tokens are chosen once here (sampled at ``temperature``, ``top_k``, ``top_p``, seeded); the sliders then
    show how the same logits would be filtered, with the rules of :mod:`course_lib.generation.sampling`.
    """
    from course_lib.generation.sampling import sample_next_token

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.tensor([bpe.encode(prompt)], device=device)
    records = []
    try:
        for _ in range(steps):
            logits = model(tokens[:, -model.max_len:])[:, -1].float().cpu()  # (1, vocab)
            chosen = sample_next_token(logits, temperature, top_k or None, top_p if top_p < 1 else None, gen)
            records.append({"context": bpe.decode(tokens[0].tolist()), "logits": _plain(logits[0]),
                            "chosen": int(chosen)})
            tokens = torch.cat([tokens, chosen[:, None].to(device)], dim=1)
    finally:
        model.train(was_training)
    vocab = [bpe.decode([i]) for i in range(bpe.vocab_size)]
    return Explorer({"kind": "generation", "steps": records, "vocab": vocab, "bars": bars, "temperature": temperature,
                     "top_k": top_k, "top_p": top_p,
                     "note": "Move the temperature: low sharpens the distribution, high flattens it. Top-k and "
                             "top-p grey out the tokens that can no longer be drawn."})


def explore_positions(tables: dict[str, torch.Tensor], note: str = "") -> Explorer:
    """Positions: for each named table, (positions, positions) dot products, or a (positions, d) table whose rows'
    dot products are taken; move a position and see its similarity with every other."""
    shown = []
    for label, table in tables.items():
        if table.dim() != 2:
            raise ValueError(f"explore_positions: tables[{label!r}] must be 2-D, (positions, d) or (positions, "
                             f"positions), got {tuple(table.shape)}")
        similarity = table if table.shape[0] == table.shape[1] else table @ table.T  # (positions, positions)
        shown.append({"label": label, "similarity": _plain(similarity)})
    if len({len(t["similarity"]) for t in shown}) != 1:
        raise ValueError("explore_positions: every table must cover the same number of positions")
    return Explorer({"kind": "positions", "tables": shown, "note": note or
                     "Move the position: each cell is its dot product with that position (blue positive, red "
                     "negative)."})

