"""Decoding (notebook 07): turning a trained encoder-decoder into translations, greedily or with beam search.

A model trained with teacher forcing predicts the next token given the right previous ones. At test time
nobody gives it the previous tokens: it must feed its own predictions back in, one token at a time.

- :func:`greedy_decode` takes the most likely token at every step (batched over sentences).
- :func:`beam_search` keeps the ``beam_size`` best partial translations (by summed log-probability) at
  every step, and at the end picks the best finished one by *length-normalised* score
  score / length^alpha (without it, shorter translations win simply because every extra token adds a
  negative log-probability). :func:`beam_search_step` is its heart: one top-k over all beams' extensions.
- :func:`translate` goes from strings to strings: tokenise, look up ids, decode, detokenise.

The model must offer ``encode(src) -> memory`` and ``decode(tgt_in, memory, src_mask) -> logits`` and
``max_len`` and ``pad_id`` attributes, as :class:`course_lib.models.transformer.Transformer` does.

Bad input, handled before any layer runs: a source longer than the model's ``max_len`` positions raises a
ValueError naming both lengths; an empty source (no tokens, or a row that is all padding) raises a
ValueError; unknown source words become ``<unk>`` in :func:`translate` (or raise, with ``unknown="error"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.masking import padding_mask
from course_lib.validation import validated_by

__all__ = ["greedy_decode", "beam_search_step", "beam_search", "translate"]


def _check_source(model: nn.Module, src: torch.Tensor, max_len: int | None, pad_id: int) -> int:
    """Validate a batch of source ids for decoding; return the number of target tokens to generate."""
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.dtype != torch.long:
        raise ValueError(f"decoding: src must be a LongTensor of shape (batch, src_len), got "
                         f"{getattr(src, 'dtype', type(src).__name__)} {tuple(getattr(src, 'shape', ()))}")
    if src.shape[1] == 0:
        raise ValueError(f"decoding: src has sentences of length 0 (shape {tuple(src.shape)}); give at least one "
                         f"token per sentence (an empty batch, shape (0, src_len), is fine and gives an empty result)")
    empty_rows = (src != pad_id).sum(dim=1) == 0
    if empty_rows.any():
        rows = empty_rows.nonzero().flatten().tolist()
        raise ValueError(f"decoding: source rows {rows[:10]} are all padding (empty sentences)")
    positions = getattr(model, "max_len", None)
    if positions is not None and src.shape[1] > positions:
        raise ValueError(f"decoding: src has {src.shape[1]} tokens but the model has positions for "
                         f"max_len={positions}; shorten the source or build the model with a larger max_len")
    if max_len is None:
        max_len = (positions - 1) if positions is not None else 2 * src.shape[1] + 10
    if max_len < 1:
        raise ValueError(f"decoding: max_len must be >= 1, got {max_len}")
    if positions is not None and max_len + 1 > positions:  # tgt_in holds <bos> + max_len - 1 tokens, +1 slack
        raise ValueError(f"decoding: max_len={max_len} needs {max_len + 1} target positions but the model has "
                         f"max_len={positions}")
    return max_len


@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, max_len: int | None = None, bos_id: int = 1,
                  eos_id: int = 2) -> torch.Tensor:
    """Translate a batch by taking the most likely token at every step.

    The source is encoded once; at step t the decoder reads ``<bos>`` and the t tokens chosen so far
    and the last position's argmax is appended. A sentence that has produced ``<eos>`` gets padding
    from then on; the loop stops when every sentence is finished or after ``max_len`` tokens.

    Shapes: ``src`` (batch, src_len) -> (batch, out_len) token ids without ``<bos>``, each row ending
    with ``<eos>`` (if it finished) followed by padding; out_len <= max_len.

    Example:
        >>> out = greedy_decode(model, batch.src, max_len=20)   # doctest: +SKIP
    """
    pad_id = getattr(model, "pad_id", 0)
    max_len = _check_source(model, src, max_len, pad_id)
    if src.shape[0] == 0:
        return src.new_empty(0, 0)                               # an empty batch: nothing to translate
    model.eval()
    memory = model.encode(src)                                   # (batch, src_len, d_model)
    src_mask = padding_mask(src, pad_id)                         # (batch, 1, 1, src_len)
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (batch, 1)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)[:, -1]       # (batch, vocab): the last position
        next_token = logits.argmax(dim=-1)                       # (batch,)
        next_token = next_token.masked_fill(finished, pad_id)
        ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)     # (batch, t + 2)
        finished |= next_token == eos_id
        if finished.all():
            break
    return ys[:, 1:]


def _check_beam_step(scores: torch.Tensor, log_probs: torch.Tensor, beam_size: int) -> None:
    """Raise a clear error unless scores (batch, beam), log_probs (batch, beam, vocab), 1 <= beam_size <= beam*vocab."""
    who = "beam_search_step"
    for name, t, dims in (("scores", scores, "(batch, beam)"), ("log_probs", log_probs, "(batch, beam, vocab)")):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"{who}: {name} must be a float tensor of shape {dims}, got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
    if scores.dim() != 2 or log_probs.dim() != 3 or log_probs.shape[:2] != scores.shape:
        raise ValueError(f"{who}: scores must have shape (batch, beam) and log_probs (batch, beam, vocab) with the "
                         f"same batch and beam; got scores {tuple(scores.shape)} and log_probs "
                         f"{tuple(log_probs.shape)}")
    candidates = log_probs.shape[1] * log_probs.shape[2]
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or not 1 <= beam_size <= candidates:
        raise ValueError(f"{who}: beam_size must be an int from 1 to beam * vocab = {candidates} (the number of "
                         f"candidates), got {beam_size!r}")


@validated_by(_check_beam_step)
def beam_search_step(scores: torch.Tensor, log_probs: torch.Tensor,
                     beam_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of beam search: the ``beam_size`` best extensions over all beams of each sentence.

    Every beam b (with summed log-probability ``scores[:, b]``) can be extended by every token v (with
    log-probability ``log_probs[:, b, v]``); the candidate's score is the sum. The best ``beam_size``
    candidates are taken over all beam_size * vocab candidates at once, not per beam.

    Shapes: ``scores`` (batch, beam), ``log_probs`` (batch, beam, vocab) ->
    ``(new_scores (batch, beam_size), beam_index (batch, beam_size), token (batch, beam_size))``, best
    first: candidate k continues beam ``beam_index[:, k]`` with token ``token[:, k]``.

    Example:
        >>> s = torch.tensor([[0.0, -1.0]])
        >>> lp = torch.log(torch.tensor([[[0.6, 0.4], [0.9, 0.1]]]))
        >>> new, beam, tok = beam_search_step(s, lp, 2)
        >>> beam.tolist(), tok.tolist()
        ([[0, 0]], [[0, 1]])
    """
    batch, beam, vocab = log_probs.shape
    candidates = scores.unsqueeze(-1) + log_probs                # (batch, beam, vocab)
    flat = candidates.reshape(batch, beam * vocab)               # (batch, beam * vocab)
    new_scores, index = flat.topk(beam_size, dim=-1)             # (batch, beam_size) each
    return new_scores, index // vocab, index % vocab


@torch.no_grad()
def beam_search(model: nn.Module, src: torch.Tensor, beam_size: int = 4, max_len: int | None = None,
                length_penalty: float = 1.0, bos_id: int = 1, eos_id: int = 2,
                return_scores: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Translate a batch with beam search and length normalisation.

    Each sentence keeps ``beam_size`` hypotheses, all decoded together as one batch of batch * beam_size
    rows (the memory is repeated). At each step :func:`beam_search_step` keeps the best extensions by
    summed log-probability. A hypothesis that produced ``<eos>`` is finished: it can only be extended by
    padding at no cost, so it keeps its score and competes with the others. When every hypothesis is
    finished (or after ``max_len`` tokens), the winner of each sentence is the one with the best
    normalised score ``score / length ** length_penalty`` (length counts ``<eos>``; 0 disables the
    normalisation, 1 ranks by mean log-probability per token).

    ``beam_size=1`` gives the same tokens as :func:`greedy_decode`. A beam wider than the vocabulary is
    allowed (an exhaustive search on a tiny vocabulary): the beams that have no candidate yet keep a score
    of -inf and never win. An empty batch, shape (0, src_len), gives an empty result.

    Shapes: ``src`` (batch, src_len) -> (batch, out_len) ids as :func:`greedy_decode` returns them; with
    ``return_scores`` also the normalised scores (batch,).
    """
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_search: beam_size must be an int >= 1, got {beam_size!r}")
    if length_penalty < 0:
        raise ValueError(f"beam_search: length_penalty must be >= 0, got {length_penalty}")
    pad_id = getattr(model, "pad_id", 0)
    max_len = _check_source(model, src, max_len, pad_id)
    if src.shape[0] == 0:                                        # an empty batch: nothing to translate
        return (src.new_empty(0, 0), torch.empty(0, device=src.device)) if return_scores else src.new_empty(0, 0)
    model.eval()
    batch, k = src.shape[0], beam_size
    memory = model.encode(src).repeat_interleave(k, dim=0)           # (batch * k, src_len, d_model)
    src_mask = padding_mask(src, pad_id).repeat_interleave(k, dim=0)  # (batch * k, 1, 1, src_len)
    ys = torch.full((batch, k, 1), bos_id, dtype=torch.long, device=src.device)  # (batch, k, 1)
    scores = torch.zeros(batch, k, device=src.device)
    scores[:, 1:] = float("-inf")      # at first all beams are the same <bos>: expand only one of them
    finished = torch.zeros(batch, k, dtype=torch.bool, device=src.device)
    lengths = torch.zeros(batch, k, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys.reshape(batch * k, -1), memory, src_mask)[:, -1]  # (batch * k, vocab)
        log_probs = F.log_softmax(logits.float(), dim=-1).reshape(batch, k, -1)    # (batch, k, vocab)
        # A finished hypothesis may only be followed by padding, which costs nothing.
        done = torch.full_like(log_probs[0, 0], float("-inf"))
        done[pad_id] = 0.0
        log_probs = torch.where(finished.unsqueeze(-1), done, log_probs)
        scores, beam_index, token = beam_search_step(scores, log_probs, k)       # (batch, k) each
        ys = torch.cat([ys.gather(1, beam_index.unsqueeze(-1).expand(-1, -1, ys.shape[-1])),
                        token.unsqueeze(-1)], dim=-1)                            # (batch, k, t + 2)
        was_finished = finished.gather(1, beam_index)
        lengths = lengths.gather(1, beam_index) + (~was_finished).float()
        finished = was_finished | (token == eos_id)
        if finished.all():
            break
    normalised = scores / lengths.clamp(min=1) ** length_penalty                  # (batch, k)
    best = normalised.argmax(dim=-1)                                              # (batch,)
    out = ys[torch.arange(batch, device=src.device), best, 1:]                    # (batch, out_len)
    if return_scores:
        return out, normalised.gather(1, best.unsqueeze(1)).squeeze(1)
    return out


@torch.no_grad()
def translate(model: nn.Module, sentences: Sequence[str], src_tokenizer, src_vocab, tgt_tokenizer, tgt_vocab,
              method: Literal["greedy", "beam"] = "greedy", beam_size: int = 4, length_penalty: float = 1.0,
              batch_size: int = 256, max_len: int | None = None, unknown: Literal["unk", "error"] = "unk",
              device: torch.device | str | None = None) -> list[str]:
    """Translate strings: tokenise, look up ids, decode (greedy or beam), map back to strings.

    Sentences are decoded in batches of similar length (less padding) and returned in the input order.
    Unknown source tokens become ``<unk>`` (``unknown="unk"``; the model has rarely or never seen it, so
    expect a poor translation) or raise a KeyError naming them (``unknown="error"``). An empty sentence
    raises a ValueError naming its index; one longer than the model's positions raises a ValueError.

    Example:
        >>> translate(model, ["sixty-four"], WordTokenizer(), src_vocab, bpe, tgt_vocab)  # doctest: +SKIP
        ['vierundsechzig']
    """
    if method not in ("greedy", "beam"):
        raise ValueError(f"translate: method must be 'greedy' or 'beam', got {method!r}")
    if isinstance(sentences, str):
        raise TypeError("translate: sentences must be a list of strings, got one string (wrap it in a list)")
    device = device if device is not None else next(model.parameters()).device
    encoded = []
    for i, sentence in enumerate(sentences):
        ids = src_vocab.encode(src_tokenizer.tokenize(sentence), unknown=unknown)
        if not ids:
            raise ValueError(f"translate: sentence {i} ({sentence!r}) is empty after tokenisation")
        encoded.append(ids)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    results: list[str] = [""] * len(encoded)
    pad_id = src_vocab.pad_id
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        longest = max(len(encoded[i]) for i in chunk)
        src = torch.full((len(chunk), longest), pad_id, dtype=torch.long)  # (batch, src_len)
        for row, i in enumerate(chunk):
            src[row, :len(encoded[i])] = torch.tensor(encoded[i])
        src = src.to(device)
        if method == "greedy":
            out = greedy_decode(model, src, max_len, tgt_vocab.bos_id, tgt_vocab.eos_id)
        else:
            out = beam_search(model, src, beam_size, max_len, length_penalty, tgt_vocab.bos_id, tgt_vocab.eos_id)
        for row, i in enumerate(chunk):
            results[i] = tgt_tokenizer.detokenize(tgt_vocab.decode(out[row].tolist()))
    return results
