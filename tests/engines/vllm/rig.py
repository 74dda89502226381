# SPDX-License-Identifier: GPL-2.0
"""vLLM's engine core around the beluga adapter, in one process.

What decides the adapter's calls is vLLM's own code: its config classes,
its KV cache planner (``get_kv_cache_configs``), its ``Scheduler``, which
builds the ``OffloadingConnector`` from ``kv_transfer_config`` (and so
vLLM's ``build_offloading_config`` and ``OffloadingSpecFactory``), the
connector's worker side with its ``register_kv_caches`` and canonical page
mappings, and vLLM's ``allocate_kv_cache`` for the per-layer cache views.

Stand-ins, because the build machines have no GPU and no model runs:
- The KV cache is allocated by ``allocate_kv_cache`` on ``device`` ("cpu"
  here; "cuda" where a GPU is present), the call vLLM's GPU model runner
  makes with the GPU.
- The forward pass: ``Engine.step`` writes, for every token it schedules,
  a KV value that is a function of the token's prefix and the layer
  (``expected_kv``) into vLLM's per-layer cache views. A token whose KV came
  from the pool must then hold the bytes it would have had if computed,
  which ``check_running`` verifies after every step.
- The executor: an engine's workers run one after the other in this
  process, each with the VllmConfig of its rank; vLLM's
  ``KVOutputAggregator`` merges their outputs as the real executor does.
- Sampling: a token that depends only on the sequence so far.
- The platform: without a GPU vLLM's platform is UnspecifiedPlatform, which
  says it cannot run the hybrid KV cache manager; the rig answers as the
  CUDA platform does, so that a model with sliding-window layers gets its
  KV cache groups as on a GPU.
"""

import hashlib
import json
import os

import torch

from vllm.config import (CacheConfig, DeviceConfig, KVEventsConfig, KVTransferConfig,
                         ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig)
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
from vllm.v1.core.kv_cache_utils import (generate_scheduler_kv_cache_config,
                                         get_request_block_hasher, init_none_hash,
                                         resolve_kv_cache_block_sizes)
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.platforms import current_platform
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.worker.utils import allocate_kv_cache

# A Llama of four layers and four KV heads of 32: a 16-token block of every
# layer and head is 32 KiB, so it fits one 64 KiB pool block.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
    "vocab_size": 1000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
}
VOCAB = TINY_LLAMA["vocab_size"]

type(current_platform).support_hybrid_kv_cache = classmethod(lambda cls: True)


# A DeepSeek-V2 of four layers: MLA, one latent of 64 + 32 values per token
# and layer, the same on every TP rank.
TINY_DEEPSEEK_MLA = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
    "kv_lora_rank": 64, "qk_rope_head_dim": 32, "qk_nope_head_dim": 32, "v_head_dim": 32,
    "q_lora_rank": None, "head_dim": None, "num_key_value_heads": 8,
    "first_k_dense_replace": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
}


def write_model(directory, **overrides):
    """A model directory holding only config.json: vLLM reads the model's
    geometry from it; no weights are needed because no model runs."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(dict(TINY_LLAMA, **overrides), f)
    return str(directory)


def vllm_config(model_dir, kv_transfer_config, *, dtype="bfloat16", tp_size=1, pp_size=1,
                rank=0, layout="LBNHC", block_size=16, max_model_len=512, kv_events=False):
    """The VllmConfig of one process of an engine (rank 0 also schedules);
    ``kv_events``: --kv-events-config with KV cache events on (the
    scheduler's publisher is vLLM's null one: a test may replace it)."""
    model = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype=dtype,
                        max_model_len=max_model_len, seed=0)
    parallel = ParallelConfig(tensor_parallel_size=tp_size, pipeline_parallel_size=pp_size,
                              distributed_executor_backend="mp" if tp_size * pp_size > 1
                              else None)
    cfg = VllmConfig(model_config=model, cache_config=CacheConfig(block_size=block_size),
                     parallel_config=parallel,
                     kv_transfer_config=KVTransferConfig(**kv_transfer_config),
                     scheduler_config=SchedulerConfig(max_num_batched_tokens=1024,
                                                      max_num_seqs=16,
                                                      max_model_len=max_model_len,
                                                      is_encoder_decoder=False),
                     device_config=DeviceConfig(device="cpu"),
                     kv_events_config=KVEventsConfig(enable_kv_cache_events=True,
                                                     publisher="null") if kv_events else None)
    # The engine core resolves the layout from the attention backends; with
    # no backend here the test names it, which vLLM allows tests to do.
    cfg.cache_config.kv_cache_layout = layout
    cfg.parallel_config.rank = rank
    return cfg


def expected_kv(token_ids, position, num_layers, num_heads, cell, dtype):
    """The KV of the token at ``position``, a function of its prefix only:
    (layers, heads, cell) in ``dtype``, every head; a cell is one head's K
    and V, or an MLA latent."""
    prefix = torch.tensor(token_ids[:position + 1], dtype=torch.int64).numpy().tobytes()
    seed = int.from_bytes(hashlib.sha256(prefix).digest()[:8], "little")
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((num_layers, num_heads, cell), generator=gen).to(dtype)


def next_token(token_ids):
    return int.from_bytes(hashlib.sha256(str(token_ids).encode()).digest()[:4], "little") % VOCAB


class Worker:
    """One worker process: its connector and its KV cache."""

    def __init__(self, cfg, kv_cache_config, layer_names, device):
        """``layer_names``: the model's layers in order; each is written with
        the block table of its KV cache group."""
        self.cfg = cfg
        self.connector = OffloadingConnector(cfg, KVConnectorRole.WORKER, kv_cache_config)
        self.layer_names = layer_names
        self.caches = allocate_kv_cache(kv_cache_config, torch.device(device),
                                        cfg.cache_config.get_resolved_kv_cache_layout())
        self.connector.register_kv_caches(self.caches)
        model, parallel = cfg.model_config, cfg.parallel_config
        self.head_count = model.get_num_kv_heads(parallel)
        tp, total = parallel.tensor_parallel_size, model.get_total_num_kv_heads()
        rank = parallel.rank % tp
        # vLLM's head shard of a rank: total/tp consecutive heads, or one
        # head replicated over tp/total ranks when there are fewer heads;
        # every rank holds the one MLA latent.
        self.first_head = 0 if model.use_mla else \
            rank * total // tp if total >= tp else rank // (tp // total)

    def heads(self, kv):
        return kv[:, self.first_head:self.first_head + self.head_count]

    def write(self, layer, block_id, slot, kv):
        """The forward pass writing one token's KV of one layer."""
        name = self.layer_names[layer]
        self.caches[name][block_id, :, slot, :] = self.heads(kv)[layer].to(
            self.caches[name].device)

    def read(self, layer, block_id, slot):
        return self.caches[self.layer_names[layer]][block_id, :, slot, :].cpu()

    def begin(self, so):
        """What the model runner does before the forward pass."""
        c = self.connector
        c.handle_preemptions(so.kv_connector_metadata)
        c.bind_connector_metadata(so.kv_connector_metadata)
        c.start_load_kv(None)

    def end(self, so):
        """... and after it."""
        c = self.connector
        c.wait_for_save()
        results = c.get_transfer_results(so.finished_req_ids)
        meta = c.build_connector_worker_meta()
        c.clear_connector_metadata()
        return KVConnectorOutput(finished_sending=results.finished_sending,
                                 finished_recving=results.finished_recving,
                                 kv_connector_worker_meta=meta)


class Engine:
    """One vLLM instance: a scheduler and ``tp_size * pp_size`` workers."""

    def __init__(self, model_dir, kv_transfer_config, *, num_gpu_blocks=64, device="cpu",
                 sliding_window=None, **config):
        """``sliding_window``: the odd layers attend to that many tokens
        (a hybrid model: two KV cache groups)."""
        world = config.get("tp_size", 1) * config.get("pp_size", 1)
        cfgs = [vllm_config(model_dir, kv_transfer_config, rank=r, **config)
                for r in range(world)]
        self.cfg = cfg = cfgs[0]
        model = cfg.model_config
        self.dtype = model.dtype
        self.num_layers = model.get_num_layers(cfg.parallel_config)
        self.block_size = cfg.cache_config.block_size
        names = [f"model.layers.{i}.self_attn.attn" for i in range(self.num_layers)]
        geometry = dict(block_size=self.block_size, head_size=model.get_head_size(),
                        dtype=self.dtype, num_kv_heads=model.get_num_kv_heads(cfg.parallel_config))
        full = (MLAAttentionSpec if model.use_mla else FullAttentionSpec)(**geometry)
        self.total_heads = 1 if model.use_mla else model.get_total_num_kv_heads()
        self.cell = full.state_content_size_bytes // full.dtype.itemsize
        windowed = SlidingWindowSpec(sliding_window=sliding_window, **geometry) \
            if sliding_window else full
        layer_specs = {n: windowed if i % 2 else full for i, n in enumerate(names)}
        # What the engine core does with the workers' specs (EngineCore.
        # _initialize_kv_caches), with the memory of num_gpu_blocks blocks.
        specs = [layer_specs for _ in cfgs]
        memory = [full.page_size_bytes * len(names) * num_gpu_blocks] * world
        kv_cfgs = get_kv_cache_configs(cfg, specs, memory,
                                       get_global_kv_cache_groups(cfg, specs))
        for k in kv_cfgs:
            k.kv_cache_layout = cfg.cache_config.kv_cache_layout
        sched_cfg = generate_scheduler_kv_cache_config(kv_cfgs)
        cfg.cache_config.num_gpu_blocks = sched_cfg.num_blocks
        sched_block, hash_block = resolve_kv_cache_block_sizes(sched_cfg, cfg)
        for k in (*kv_cfgs, sched_cfg):
            k.hash_block_size = hash_block
            k.cache_hit_alignment_tokens = sched_block
        self.scheduler = Scheduler(vllm_config=cfg, kv_cache_config=sched_cfg,
                                   structured_output_manager=StructuredOutputManager(cfg),
                                   block_size=sched_block, hash_block_size=hash_block)
        hash_fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.block_hasher = get_request_block_hasher(hash_block, hash_fn)
        self.workers = [Worker(c, k, names, device) for c, k in zip(cfgs, kv_cfgs)]
        # The KV cache group of each layer, whose block table it uses.
        self.layer_group = [next(g for g, group in enumerate(sched_cfg.kv_cache_groups)
                                 if n in group.layer_names) for n in names]
        self.aggregator = KVOutputAggregator.from_connector(self.scheduler.connector, world)
        self.external_tokens = {}     # request -> prompt tokens vLLM loaded

    @property
    def manager(self):
        """The OffloadingManager vLLM's connector got from the spec."""
        return self.scheduler.connector.scheduler.manager

    def add(self, request_id, prompt, max_tokens=1):
        self.scheduler.add_request(Request(
            request_id, list(prompt), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
            None, block_hasher=self.block_hasher))

    def _kv(self, token_ids, position):
        return expected_kv(token_ids, position, self.num_layers, self.total_heads, self.cell,
                           self.dtype)

    def step(self):
        """One engine step: schedule, run the workers around the forward
        pass, hand their outputs back to the scheduler."""
        return self.execute(self.scheduler.schedule())

    def execute(self, so):
        """The workers' part of a step that ``so`` scheduled."""
        for w in self.workers:
            w.begin(so)
        sampled = {}
        for req_id, n in so.num_scheduled_tokens.items():
            req = self.scheduler.requests[req_id]
            end = req.num_computed_tokens        # schedule() has advanced it
            tables = self.scheduler.kv_cache_manager.get_block_ids(req_id)
            for pos in range(end - n, end):
                kv = self._kv(req.all_token_ids, pos)
                for layer, block_id, slot in self._slots(tables, pos):
                    for w in self.workers:
                        w.write(layer, block_id, slot, kv)
            if end >= req.num_tokens:
                sampled[req_id] = [next_token(req.all_token_ids)]
        req_ids = list(so.num_scheduled_tokens)
        outputs = [ModelRunnerOutput(req_ids=req_ids,
                                     req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                     sampled_token_ids=[sampled.get(r, []) for r in req_ids],
                                     kv_connector_output=w.end(so))
                   for w in self.workers]
        merged = self.aggregator.aggregate(outputs)
        engine_outputs = self.scheduler.update_from_output(so, merged)
        for eco in engine_outputs.values():
            for o in eco.outputs:
                if o.prefill_stats is not None:
                    self.external_tokens[o.request_id] = o.prefill_stats.num_external_cached_tokens
        return so

    def _slots(self, tables, pos):
        """(layer, block id, slot) of the token at ``pos`` in every layer
        whose group holds a block for it (a sliding window's group has freed
        the blocks behind the window: block 0, vLLM's null block), given
        the request's block tables."""
        b, slot = divmod(pos, self.block_size)
        for layer, group in enumerate(self.layer_group):
            if b < len(tables[group]) and tables[group][b] != 0:
                yield layer, tables[group][b], slot

    def wrong_tokens(self):
        """(request, position, layer) of every computed token of a running
        request whose KV on some worker is not the one its prefix gives."""
        bad = []
        for req in self.scheduler.running:
            tables = self.scheduler.kv_cache_manager.get_block_ids(req.request_id)
            for pos in range(req.num_computed_tokens):
                want = self._kv(req.all_token_ids, pos)
                for layer, block_id, slot in self._slots(tables, pos):
                    for w in self.workers:
                        got = w.read(layer, block_id, slot)
                        # Bit for bit: compare the bytes, not the values.
                        if not torch.equal(got.view(torch.int16),
                                           w.heads(want)[layer].view(torch.int16)):
                            bad.append((req.request_id, pos, layer))
        return bad

    def run(self, max_steps=300):
        """Step until every request finished, checking every token's KV."""
        for _ in range(max_steps):
            if not self.scheduler.has_requests():
                return
            self.step()
            bad = self.wrong_tokens()
            assert not bad, f"tokens whose KV differs from the computed one: {bad[:8]}"
        raise AssertionError(f"requests still unfinished after {max_steps} steps")

    def serve(self, prompts, max_tokens=2):
        """Run ``prompts`` ({id: tokens}) to completion, checking every
        token's KV after every step; the number of their prompt tokens vLLM
        took from the offloading connector."""
        for rid, tokens in prompts.items():
            self.add(rid, tokens, max_tokens)
        self.run()
        return sum(self.external_tokens[rid] for rid in prompts)

    def shutdown(self):
        for w in self.workers:
            w.connector.shutdown()
        self.scheduler.shutdown()


def with_extra(kv_transfer_config, **extra):
    """The kv_transfer_config with more kv_connector_extra_config keys."""
    out = dict(kv_transfer_config)
    out["kv_connector_extra_config"] = dict(out["kv_connector_extra_config"], **extra)
    return out
