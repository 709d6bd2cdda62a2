"""The models and their building blocks: everything that is an ``nn.Module`` or the formula inside one.

One module per idea, in the notebooks' order; each imports only other model modules and
``course_lib.validation`` (``tests/repository/test_repository.py`` keeps it so for every file of this package):

- :mod:`~course_lib.models.softmax` (00): a numerically stable softmax;
- :mod:`~course_lib.models.attention` (01, 02): scaled dot-product and multi-head attention;
- :mod:`~course_lib.models.positional` (03): sinusoidal and learned positions;
- :mod:`~course_lib.models.masking` (04): the course's one mask convention and conversions to the others;
- :mod:`~course_lib.models.layers` (05, 06): feed-forward block, encoder and decoder layers and stacks;
- :mod:`~course_lib.models.transformer` (06): the encoder-decoder Transformer of the paper;
- :mod:`~course_lib.models.kv_cache` (11): one attention layer's key/value cache;
- :mod:`~course_lib.models.vit` (08), :mod:`~course_lib.models.gpt` (11), :mod:`~course_lib.models.bert` (12):
  the Transformer's descendants, built on the same layers;
- :mod:`~course_lib.models.seq2seq` (09): the recurrent encoder-decoder with additive attention;
- :mod:`~course_lib.models.baselines` (08, 09): the LSTM and CNN models self-attention is compared with;
- :mod:`~course_lib.models.complexity` (09): what each kind of layer costs (the paper's Table 1);
- :mod:`~course_lib.models.ngram` (11): the interpolated Kneser-Ney n-gram language model, the count-based
  baseline a neural language model must beat (a model: it gives next-token probabilities as the others do).
- today's models (14): :mod:`~course_lib.models.rope` (rotary positions), :mod:`~course_lib.models.gqa`
  (grouped-query attention, sliding window), :mod:`~course_lib.models.llama` (RMSNorm, SwiGLU, the pre-norm
  block, a Llama-layout LM), :mod:`~course_lib.models.flash_attention` (tiled attention with an online
  softmax) and :mod:`~course_lib.models.pretrained` (Hugging Face checkpoints from a local folder).

The most used names are importable from ``course_lib`` itself (``from course_lib import MultiHeadAttention``).
"""
