"""The explorer (course_lib.figures.explorer): its data is the model's own (weights, logits), its widget carries a
static twin, and in a real browser a hover or a slider changes the view, with the sampling rules of
course_lib.generation.sampling, the network cut off."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from course_lib.data.python_docs import ByteBPE
from course_lib.data.translation import Vocab, WordTokenizer
from course_lib.figures.explorer import (
    attention_input,
    explore_generation,
    explore_gpt_attention,
    explore_heads,
    explore_positions,
    explore_translation,
    static_html,
)
from course_lib.generation.sampling import top_k_filter, top_p_filter
from course_lib.models.gpt import GPT
from course_lib.models.positional import sinusoidal_table
from course_lib.models.transformer import Transformer

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["the cat sat on the mat and the dog sat on the log"] * 4


def tiny_gpt() -> tuple[GPT, ByteBPE]:
    torch.manual_seed(0)
    bpe = ByteBPE.train(TEXTS, vocab_size=270)
    return GPT(bpe.vocab_size, d_model=16, num_heads=2, num_layers=2, max_len=32), bpe


def tiny_translator() -> tuple[Transformer, WordTokenizer, Vocab, Vocab]:
    torch.manual_seed(0)
    src_tok = WordTokenizer()
    src_vocab = Vocab.build([src_tok.tokenize("forty five twenty one")])
    tgt_vocab = Vocab.build([["fünf", "und", "vierzig", "ein", "zwanzig"]])
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                        num_decoder_layers=2, d_ff=32, dropout=0.0, max_len=16)
    return model, src_tok, src_vocab, tgt_vocab


def test_gpt_attention_view_holds_the_models_weights() -> None:
    model, bpe = tiny_gpt()
    view = explore_gpt_attention(model, bpe, ["the cat sat"])
    data = view.data
    ids = bpe.encode("the cat sat")
    expected = model.eval().attention_weights(torch.tensor([ids]))
    assert data["kind"] == "attention" and len(data["inputs"][0]["layers"]) == 2
    assert data["inputs"][0]["query_tokens"] == [bpe.decode([i]) for i in ids]
    for got, want in zip(data["inputs"][0]["layers"], expected, strict=True):
        assert torch.allclose(torch.tensor(got), want[0], atol=1e-4)  # rounded to 4 decimals
    view.query = "the dog"  # what the learner types runs through the model once
    assert view.data["inputs"][0]["text"] == "the dog" and len(view.data["inputs"]) == 2


def test_translation_view_is_cross_attention_of_the_greedy_output() -> None:
    model, src_tok, src_vocab, tgt_vocab = tiny_translator()
    data = explore_translation(model, ["forty five"], src_tok, src_vocab, tgt_vocab, max_len=6).data
    one = data["inputs"][0]
    assert one["key_tokens"] == src_tok.tokenize("forty five")
    heads = torch.tensor(one["layers"][-1])  # (heads, out, src)
    assert one["query_tokens"][-1] == "<eos>" and heads.shape == (2, len(one["query_tokens"]), 2)
    assert torch.allclose(heads.sum(-1), torch.ones(heads.shape[:2]), atol=1e-3)


def test_generation_view_records_the_logits_of_each_step() -> None:
    model, bpe = tiny_gpt()
    data = explore_generation(model, bpe, "the cat", steps=3).data
    assert [len(s["logits"]) for s in data["steps"]] == [bpe.vocab_size] * 3
    first = model.eval()(torch.tensor([bpe.encode("the cat")]))[0, -1]
    assert torch.allclose(torch.tensor(data["steps"][0]["logits"]), first, atol=1e-4)
    assert data["steps"][1]["context"] == "the cat" + bpe.decode([data["steps"][0]["chosen"]])


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match=r"layers\[0\] must have shape \(heads, 2, 3\)"):
        attention_input("x", ["a", "b"], ["a", "b", "c"], [torch.rand(2, 3, 3)])
    with pytest.raises(ValueError, match="inputs is empty"):
        explore_heads([])
    with pytest.raises(ValueError, match=r"tables\['x'\] must be 2-D"):
        explore_positions({"x": torch.rand(3)})


def test_the_widget_carries_its_static_twin_and_a_text_line() -> None:
    view = explore_positions({"sinusoidal": sinusoidal_table(16, 8)})
    bundle, _ = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert 'class="course-explorer"' in bundle["text/html"] and "renderStatic(" in bundle["text/html"]
    assert "http://" not in bundle["text/html"] and "https://" not in bundle["text/html"]  # nothing fetched
    assert bundle["text/plain"].startswith("course explorer (positions)")


def test_static_html_never_closes_its_script_early() -> None:
    page = static_html({"kind": "positions", "tables": [], "note": "</script><b>x"})
    assert page.count("</script>") == 1


def test_the_site_shows_the_static_twin(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from build_site import WIDGET_VIEW, stage_notebook

    view = explore_positions({"sinusoidal": sinusoidal_table(8, 4)})
    bundle, _ = view._repr_mimebundle_()
    output = {"output_type": "display_data", "data": bundle, "metadata": {}}
    progress = {"output_type": "display_data", "data": {WIDGET_VIEW: {"model_id": "x"}, "text/plain": "bar"},
                "metadata": {}}
    notebook = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": [output, progress]}],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    src, dst = tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb"
    src.write_text(json.dumps(notebook))
    stage_notebook(src, dst)
    staged = json.loads(dst.read_text())["cells"][0]["outputs"]
    assert WIDGET_VIEW not in staged[0]["data"] and "text/html" in staged[0]["data"]
    assert WIDGET_VIEW in staged[1]["data"]  # other widgets (progress bars) are left as they are


# ---- in a real browser (the CI's Chromium), the network cut off ----

def _offline_page(browser, tmp_path: Path, views: list) -> tuple[object, list[str]]:
    """A page holding the views' static twins (as the website shows them), opened with every request but the
    page itself refused; returns the page and the list of refused requests."""
    page_file = tmp_path / "views.html"
    page_file.write_text("<!doctype html><html><body>" + "".join(static_html(v.data) for v in views)
                         + "</body></html>", encoding="utf-8")
    page = browser.new_page()
    refused: list[str] = []
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def route(request_route) -> None:
        if request_route.request.url.startswith("file:"):
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    page.goto(page_file.as_uri())
    page.wait_for_selector("[data-view=generation] .cx-bar")
    assert not errors, errors
    return page, refused


def _tokens(page, side: str) -> list[str]:
    return page.eval_on_selector_all(f"[data-view=attention] [data-side={side}] .cx-token",
                                     "els => els.map(e => e.dataset.weight)")


@pytest.mark.slow
def test_hover_and_sliders_change_the_static_views(tmp_path: Path) -> None:
    from browser import chromium

    model, bpe = tiny_gpt()
    attention = explore_gpt_attention(model, bpe, ["the cat sat on the mat"])
    generation = explore_generation(model, bpe, "the cat", steps=4)
    positions = explore_positions({"sinusoidal": sinusoidal_table(16, 8)})
    with chromium() as browser:
        page, refused = _offline_page(browser, tmp_path, [attention, generation, positions])
        assert _tokens(page, "key") == [""] * len(_tokens(page, "key"))  # nothing highlighted yet
        page.hover("[data-view=attention] [data-side=query] .cx-token[data-index='3']")
        shown = [float(w) for w in _tokens(page, "key")]
        layer = attention.data["inputs"][0]["layers"][-1]  # the last layer, heads averaged (the default view)
        expected = [sum(head[3][k] for head in layer) / len(layer) for k in range(len(shown))]
        assert shown == pytest.approx(expected, abs=1e-3) and shown[4:] == [0.0] * len(shown[4:])  # causal
        page.hover("[data-view=attention] [data-side=key] .cx-token[data-index='0']")
        assert [float(w) for w in _tokens(page, "query")][0] > 0

        bars = "els => els.map(e => Number(e.dataset.prob))"
        before = page.eval_on_selector_all("[data-view=generation] .cx-bar", bars)
        page.fill("[data-view=generation] input[data-name=temperature]", "0.3")
        page.dispatch_event("[data-view=generation] input[data-name=temperature]", "input")
        after = page.eval_on_selector_all("[data-view=generation] .cx-bar", bars)
        assert after[0] > before[0]  # a low temperature sharpens the distribution
        page.fill("[data-view=generation] input[data-name=top_k]", "3")
        page.dispatch_event("[data-view=generation] input[data-name=top_k]", "input")
        greyed = page.eval_on_selector_all("[data-view=generation] .cx-bar.cx-out", "els => els.length")
        assert greyed == generation.data["bars"] - 3
        assert refused == []


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.6), (0.5, 8, 0.3),
                                                    (1.0, 0, 0.05)])
def test_the_browsers_filter_is_the_courses(temperature: float, top_k: int, top_p: float) -> None:
    from browser import chromium

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 40, generator=gen, dtype=torch.float64) * 3
    logits[1, :5] = logits[1, 5]  # ties at the cut
    script = (ROOT / "course_lib" / "figures" / "explorer.js").read_text(encoding="utf-8")
    with chromium() as browser:
        page = browser.new_page()
        page.set_content("<html><body></body></html>")
        page.add_script_tag(content=script + "\nwindow.cxFiltered = filtered;", type="module")
        page.wait_for_function("() => window.cxFiltered !== undefined")
        for row in logits:
            got = page.evaluate("([l, t, k, p]) => window.cxFiltered(l, t, k, p).keep",
                                [row.tolist(), temperature, top_k, top_p])
            want = row / temperature
            if top_k:
                want = top_k_filter(want, top_k)
            if top_p < 1:
                want = top_p_filter(want, top_p)
            assert got == torch.isfinite(want).tolist()


LAB_CELLS = [
    """import torch
from course_lib.data.python_docs import ByteBPE
from course_lib.data.translation import Vocab, WordTokenizer
from course_lib.figures.explorer import explore_generation, explore_gpt_attention, explore_translation
from course_lib.models.gpt import GPT
from course_lib.models.transformer import Transformer
torch.manual_seed(0)
bpe = ByteBPE.train(["the cat sat on the mat and the dog sat on the log"] * 4, vocab_size=270)
gpt = GPT(bpe.vocab_size, d_model=16, num_heads=2, num_layers=2, max_len=32)
src_tokenizer = WordTokenizer()
src_vocab = Vocab.build([src_tokenizer.tokenize("forty five twenty one")])
tgt_vocab = Vocab.build([["fünf", "und", "vierzig", "ein", "zwanzig"]])
translator = Transformer(len(src_vocab), len(tgt_vocab), d_model=16, num_heads=2, num_encoder_layers=1,
                         num_decoder_layers=2, d_ff=32, dropout=0.0, max_len=16)""",
    "explore_translation(translator, ['forty five', 'twenty one'], src_tokenizer, src_vocab, tgt_vocab, max_len=6)",
    "explore_gpt_attention(gpt, bpe, ['the cat sat on the mat'])",
    "explore_generation(gpt, bpe, 'the cat', steps=4)",
]


@pytest.mark.slow
def test_the_explorer_in_jupyterlab(tmp_path: Path) -> None:
    """Notebook 07's translator and notebook 11's GPT (the same classes, small and untrained) in JupyterLab: the
    widget renders, a hover changes the highlighted weights, typing a sentence runs it through the model, a
    temperature slider changes the bars."""
    import nbformat
    from browser import chromium, jupyterlab, open_notebook, run_command, screenshot, wait_until_done

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in LAB_CELLS]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "explorer.ipynb"
    nbformat.write(notebook, path)
    with jupyterlab(tmp_path / "lab", [path]) as lab, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        open_notebook(page, lab, path.name)
        run_command(page, "notebook:run-all-cells")
        cells = wait_until_done(page, 300)
        assert not [o for c in cells for o in c["outputs"] if o.get("output_type") == "error"]
        page.wait_for_selector(".cx-root [data-view=generation] .cx-bar", timeout=60_000)
        assert page.locator(".cx-root [data-view=attention]").count() == 2  # the widget views, not text
        translation = page.locator(".cx-root [data-view=attention]").first
        keys = translation.locator("[data-side=key] .cx-token")
        translation.locator("[data-side=query] .cx-token").first.hover()
        weights = [float(keys.nth(i).get_attribute("data-weight")) for i in range(keys.count())]
        assert len(weights) == 2 and sum(weights) == pytest.approx(1.0, abs=2e-3)  # where a piece read
        translation.locator("input[data-name=query]").fill("twenty five")
        translation.locator("button").click()  # the model runs once, in the kernel; the view is redrawn
        page.wait_for_function("() => Array.from(document.querySelectorAll('.cx-root select option'))"
                               ".some(o => o.textContent === 'twenty five')", timeout=60_000)
        bars = page.locator(".cx-root [data-view=generation] .cx-bar")
        before = float(bars.first.get_attribute("data-prob"))
        slider = page.locator(".cx-root [data-view=generation] input[data-name=temperature]")
        slider.fill("0.2")
        slider.dispatch_event("input")
        assert float(bars.first.get_attribute("data-prob")) > before
        screenshot(page, "lab-explorer")


@pytest.mark.slow
def test_grouped_heads_name_their_key_value_head(tmp_path: Path) -> None:
    from browser import chromium

    weights = torch.softmax(torch.randn(4, 3, 3, generator=torch.Generator().manual_seed(0)), -1)  # (heads, q, k)
    view = explore_heads([attention_input("x", list("abc"), list("abc"), [weights])], groups=[0, 0, 1, 1])
    page_file = tmp_path / "grouped.html"
    page_file.write_text("<html><body>" + static_html(view.data) + "</body></html>", encoding="utf-8")
    with chromium() as browser:
        page = browser.new_page()
        page.goto(page_file.as_uri())
        page.wait_for_selector("[data-view=attention] canvas")
        options = page.eval_on_selector_all("[data-view=attention] select option", "els => els.map(e => e.textContent)")
        assert "3 (key/value head 2)" in options and "2 (key/value head 1)" in options
        assert page.locator("[data-view=attention] canvas").count() == 4  # all heads, side by side
