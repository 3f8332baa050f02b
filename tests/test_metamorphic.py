"""The parser reads the same facts whatever the presentation: bench/metamorphic.py's transforms on a fixed sample."""

from __future__ import annotations

import pytest
import yaml

from bench import metamorphic as M
from bench.accuracy import held_out, project_of
from oomdoctor.engine.loader import load_rules
from oomdoctor.parse import context as ctx
from oomdoctor.parse import parse_text
from oomdoctor.parse.normalize import Line, normalize

# Varied on purpose: HF/Keras/fastai/Ultralytics/Lightning bars and phases, pre-wrapped and rich-wrapped messages,
# NCCL and TF lines, a host kill, a hard wrap inside a one-line message, fixed-format lines at the log's widest.
# An epoch line read only with its indentation (gh-actions), a single-GPU log (journald: no vllm).
SAMPLE = (
    "generated/gen-hf-eval-at-5", "generated/gen-keras-val-epoch1", "generated/gen-fastai-train-epoch2-batch4",
    "generated/gen-ultralytics-val-epoch1", "generated/gen-lightning-test-after-fit", "generated/gen-diffusers-sample-unet",
    "synthetic/syn-wrapped-ansi", "synthetic/syn-llava7b-lora-40g-batch16",
    "reconstructed/c-nccl-multinode-p2p-calloc", "reconstructed/p3-tomotwin-hostoom",
    "reconstructed/n3-sipmask-mmdet-wrapped-cached", "reconstructed/p115-rl4lms-t5-ppo-rich-wrapped",
    "reconstructed/p81-yolofamily-voc-eval-exit137", "reconstructed/p117-cuml-svc-gridsearch-fitfailed",
    "reconstructed/b-lorafast-flux-to-device", "reconstructed/e2-alpaca-fsdp-clone-save",
    "reconstructed/p167-awdlstm-enwik8-char-epoch-line", "synthetic/syn-fragmentation",
)
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 426.00 MiB. GPU 3 has a total capacity of 79.32 GiB "
       "of which 69.56 MiB is free.")


@pytest.fixture(scope="module")
def registry() -> dict:
    return load_rules([])


@pytest.fixture(scope="module")
def sample(registry) -> list[tuple[M.Fixture, dict]]:
    """The sample's fixtures, each with what it reads as written."""
    out = []
    for name in SAMPLE:
        group, stem = name.split("/")
        sidecar = M.REPO / "fixtures" / group / f"{stem}.yaml"
        assert not held_out(project_of((yaml.safe_load(sidecar.read_text(encoding="utf-8")) or {}).get("source")))
        log = sidecar.with_suffix(".log")
        out.append((M.Fixture(group, log), M.signature(str(log), registry)))
    return out


def test_the_bench_skips_held_out_fixtures_before_opening_their_log(tmp_path):
    held = next(f"owner/repo{k}" for k in range(100) if held_out(f"owner/repo{k}"))
    dev = next(f"owner/repo{k}" for k in range(100) if not held_out(f"owner/repo{k}"))
    (tmp_path / "reconstructed").mkdir()
    for stem, source in (("h", held), ("d", dev)):
        (tmp_path / "reconstructed" / f"{stem}.yaml").write_text(f"source: {source}#1\n", encoding="utf-8")
        (tmp_path / "reconstructed" / f"{stem}.log").write_text("x\n", encoding="utf-8")
    assert [fx.log.stem for fx in M.fixtures(tmp_path)] == ["d"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(M.TRANSFORMS))
def test_each_presentation_reads_the_same_facts(name, sample, registry, tmp_path):
    results = {fx.log.stem: M.check(fx, [name], registry, tmp_path, want)[name] for fx, want in sample}
    assert {k: v for k, v in results.items() if v} == {}
    if name in M.RANK_TRANSFORMS:
        assert sum(v is not None for v in results.values()) >= 10  # the sample's unranked logs were tried


# ---- each normalisation on a real-looking line ----------------------------------------------------------


def _one(raw: str) -> Line:
    lines = normalize(7, raw)
    assert len(lines) == 1, lines
    return lines[0]


def test_html_character_references_are_read_as_their_characters():
    ln = _one("  File &quot;/home/user/train.py&quot;, line 12, in main")
    assert ln.text == '  File "/home/user/train.py", line 12, in main' and ctx.FRAME.match(ln.text)
    assert _one("If reserved memory is &gt;&gt; allocated memory try setting &#39;max_split_size_mb&#39;").text == (
        "If reserved memory is >> allocated memory try setting 'max_split_size_mb'")
    assert _one("a &amp;lt; b").text == "a &lt; b"  # one level, as the page escaped it


def test_markdown_quote_marks_come_off_the_raw_line():
    ln = _one("> [rank1]: " + OOM)
    assert (ln.rank, ln.text) == (1, OOM) and ln.raw == "[rank1]: " + OOM
    assert normalize(8, ">") == [] and normalize(9, "> ") == []
    assert _one(">   File \"train.py\", line 3").text == "  File \"train.py\", line 3"  # one space is the quote's
    assert _one(">>> import torch").text == ">>> import torch"  # a Python prompt is not a quote


def test_kubernetes_cri_prefix_keeps_the_indentation():
    ln = _one('2024-05-01T12:00:01.123456789Z stderr F     loss.backward()')
    assert ln.text == "    loss.backward()"
    assert normalize(2, "2024-05-01T12:00:01.123456789Z stdout F ") == []


def test_logging_name_level_prefix_after_its_time():
    assert _one(f"2024-05-01 12:00:01,123 - train - ERROR - {OOM}").text == OOM
    assert normalize(2, "2024-05-01 12:00:01,124 - train - INFO - ") == []


def test_hugging_face_example_scripts_logging_prefix():
    ln = _one(f"05/01/2024 12:00:01 - ERROR - __main__ - {OOM}")
    assert ln.text == OOM
    assert _one('11/28/2026 09:14:03 - INFO - __main__ -   File "run_clm.py", line 12').text == '  File "run_clm.py", line 12'
    assert normalize(2, "05/01/2024 12:00:01 - WARNING - transformers.trainer - ") == []


def test_github_actions_raw_log_timestamp_keeps_the_indentation():
    ln = _one('2024-05-01T12:00:01.1234567Z     loss.backward()')
    assert ln.text == "    loss.backward()"
    assert normalize(2, "2024-05-01T12:00:01.1234567Z ") == []


def test_systemd_journal_header_is_stripped_and_names_no_stack():
    for unit in ("python[12345]", "vllm[2211]", "bash[987]"):
        assert _one(f"Nov 28 12:00:01 gpu-node-3 {unit}: {OOM}").text == OOM
    assert _one('Nov  8 12:00:01 gpu-node-3 python[1]:   File "train.py", line 3').text == '  File "train.py", line 3'
    text = "".join(f"Nov 28 12:00:0{k} gpu-node-3 vllm[2211]: {row}\n"
                   for k, row in enumerate(["Epoch 1: step 12 loss 2.31", OOM]))
    stacks = parse_text(text).runs[0].config.get("stacks")
    assert stacks is None or "vllm" not in stacks.value  # the unit's process name is the collector's, not the program's


def test_a_console_copy_padded_to_its_width_tells_the_width():
    from oomdoctor.parse.normalize import terminal_width, unwrap

    frame = '  File "/home/user/miniconda3/envs/dev/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl'
    rows = [f"step {k} loss 2.3{k}" for k in range(8)] + [frame[:120], frame[120:], "Traceback (most recent call last):"]
    lines = _lines([r.ljust(120) for r in rows])
    assert terminal_width(lines) == 120  # one cut row: a plain terminal copy would not tell
    assert [ln.text for ln in unwrap(lines, lambda t: False)[0]][8] == frame
    assert terminal_width(_lines(rows)) is None


def test_docker_compose_prefix_on_indented_and_empty_lines():
    assert _one('trainer-1  |     File "train.py", line 12, in main').text == '    File "train.py", line 12, in main'
    assert normalize(2, "trainer-1  | ") == []


def test_a_launcher_prefix_alone_is_an_empty_line():
    assert normalize(2, "3: ") == [] and normalize(3, "rank3: ") == []
    assert (_one("3: " + OOM).rank, _one("3: " + OOM).text) == (3, OOM)


def test_trailing_padding_tells_no_wrap_but_one_space_does():
    msg = ("RuntimeError: CUDA out of memory. Tried to allocate 464.00 MiB (GPU 1; 10.76 GiB total capacity; 7.33 GiB already "
           "allocated; 97.19 MiB free; 1.19 GiB cached)")
    cut = msg.index("already") - 3  # mid-word: "...7.33 G" / "iB already"
    want = parse_text(msg[:cut] + "\n" + msg[cut:] + "\n").events[0]
    padded = parse_text(msg[:cut] + "  \n" + msg[cut:] + "  \n").events[0]
    assert want.allocated_bytes and padded.allocated_bytes == want.allocated_bytes
    space = msg.index("already")  # "...7.33 GiB " / "already": the trailing space tells the wrap
    at_space = parse_text(msg[:space] + "\n" + msg[space:] + "\n").events[0]
    assert at_space.allocated_bytes == want.allocated_bytes


def _lines(rows: list[str]) -> list[Line]:
    return [ln for k, row in enumerate(rows, 1) for ln in normalize(k, row)]


def test_a_terminal_copy_is_unwrapped_but_fixed_format_lines_are_not():
    from oomdoctor.parse.normalize import terminal_width, unwrap

    frame = '  File "/home/user/miniconda3/envs/dev/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1501, in _call_impl'
    rows = [frame[:80], frame[80:], "Epoch 3: 100%|" + "#" * 66, "12/12 [00:03<00:00]", "done"]
    lines = _lines(rows)
    assert terminal_width(lines) == 80
    joined = unwrap(lines, lambda t: False)[0]
    assert [ln.text for ln in joined] == [frame, "Epoch 3: 100%|" + "#" * 66 + "12/12 [00:03<00:00]", "done"]
    assert (joined[0].number, joined[0].end) == (1, 2)
    bars = _lines(["[Epoch 10/250][Iter 2050/2068][lr 0.001000][Loss: obj 11.29 || cls 4.09 || time: 1.01]",
                   "[Epoch 10/250][Iter 2060/2068][lr 0.001000][Loss: obj 19.60 || cls 9.24 || time: 1.01]", "eval ..."])
    assert terminal_width(bars) is None  # the widest lines are records of one format, each followed by the next
    smi = _lines(["| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |",
                  "|   0  Tesla V100-SXM2...  On   | 00000000:00:08.0 Off |                    0 |",
                  "| N/A   54C    P0   246W / 300W |  15514MiB / 16130MiB |    100%      Default |",
                  "+-------------------------------+----------------------+----------------------+",
                  "RuntimeError: CUDA error: out of memory"])
    assert unwrap(smi, lambda t: False)[0] == smi  # a table row is whole; an exception starts a record


@pytest.mark.timeout(20)
def test_a_hard_wrap_inside_a_one_line_message_ends():
    text = ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with si\n"
            "gnal SIGKILL\n"
            "/home/user/miniconda3/envs/tomotwin/lib/python3.10/multiprocessing/resource_trac\n"
            "ker.py:224: UserWarning: resource_tracker: There appear to be 1 leaked semaphore\n")
    events = parse_text(text).events
    assert [e.kind for e in events] == ["host_oom"]


def test_a_prefixed_wrapped_message_is_rejoined_from_its_text():
    msg = ("RuntimeError: CUDA out of memory. Tried to allocate 464.00 MiB (GPU 1; 10.76 GiB total capacity; 7.33 GiB already "
           "allocated; 97.19 MiB free; 1.19 GiB cached)")
    rows = [msg[:118], msg[118:]]
    plain = parse_text("\n".join(rows) + "\n").events
    k8s = parse_text("".join(f"2024-05-01T12:00:0{k}.000000001Z stderr F {r}\n" for k, r in enumerate(rows))).events
    assert plain[0].free_bytes and (k8s[0].free_bytes, k8s[0].reserved_bytes) == (plain[0].free_bytes, plain[0].reserved_bytes)


# ---- shapes a terminal's hard wrap leaves, each read as the line the program printed --------------------------


def _wrapped(text: str, width: int) -> str:
    """The text as a terminal `width` columns wide shows it: every longer line cut into rows, mid-word."""
    return M._wrap(width)(text)


def _facts(text: str) -> list[tuple]:
    return [(e.kind, e.requested_bytes, e.total_bytes, e.allocated_bytes, e.phase, e.step)
            for e in parse_text(text).events]


CACHING_2_1 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 206.00 MiB. GPU 0 has a total capacity of "
               "79.35 GiB of which 142.19 MiB is free. Process 4242 has 79.20 GiB memory in use. Of the allocated memory "
               "77.25 GiB is allocated by PyTorch, and 30.57 MiB is reserved by PyTorch but unallocated. If reserved but "
               "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
               "fragmentation.  See documentation for Memory Management  "
               "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def test_a_bar_row_cut_inside_its_blanks_is_joined_back():
    bar = "Steps:   0%|" + " " * 150 + "| 0/800 [00:12<?, ?it/s]"
    text = f"  File \"train.py\", line 9, in step\n    loss = model(batch)\n{bar}\n{CACHING_2_1}\n"
    want = _facts(text)
    assert want[0][4:] == ("train", 0)
    assert _facts(_wrapped(text, 120)) == want  # the bar's first row ends in blanks the copy kept to the width
    assert _facts(_wrapped(text, 80)) == want  # and at 80 its second row is all blanks: an empty line, dropped


def test_a_complete_message_takes_the_rest_of_its_last_cut_row():
    text = f"{CACHING_2_1}\nSteps:   3%|##        | 24/800 [00:12<07:02, 1.8it/s]\n"
    want = _facts(text)
    assert want[0][4:] == ("train", 24)  # the bar redrawn right after the message
    assert _facts(_wrapped(text, 120)) == want  # its figures were complete two rows before the message ended


def test_a_one_line_reading_gives_way_to_the_wrapped_message_it_was_cut_from():
    text = "MemoryError: Unable to allocate 315. GiB for an array with shape (10000, 100, 84480) and data type float32\n"
    assert _facts(text)[0][1] == 10000 * 100 * 84480 * 4  # the shape's exact bytes, not the rounded "315. GiB"
    assert _facts(_wrapped(text, 80)) == _facts(text)  # "MemoryError: ..." alone would read no figure


def test_a_wrapped_row_under_a_short_header_line_is_joined_without_a_space():
    text = ("Status code: Resource exhausted [9x]\n"
            "  Compilation failure: Ran out of memory in memory space hbm. Used 8.38G of 8.00G hbm. Exceeded hbm "
            "capacity by 385.25M.\n")
    want = _facts(text)
    assert want[0][2] == 8 * 2**30
    assert _facts(_wrapped(text, 80)) == want  # "8.00" / "G hbm": the header is too short to tell the width


def test_a_cut_trigger_line_is_read_with_its_rows_when_the_lines_after_it_veto_the_message():
    text = ("W tensorflow/core/common_runtime/bfc_allocator.cc:271] Ran out of memory trying to allocate 320.00MiB.  "
            "See logs for memory state.\n"
            "W tensorflow/core/common_runtime/bfc_allocator.cc:213] Ran out of memory trying to allocate 1.24GiB. The "
            "caller indicates that this is not a failure, but may mean that there could be performance gains.\n"
            "Traceback (most recent call last):\n")
    want = _facts(text)
    assert [(k, r) for k, r, *_ in want] == [("tf_oom", 320 * 2**20)]
    assert _facts(_wrapped(text, 80)) == want  # "... trying " / "to allocate 320.00MiB." then the vetoed lines


def test_a_row_cut_mid_word_before_a_colon_is_not_a_label_line():
    text = ("Error (test_torch.R:15:3): gpu imports\n"
            "Error in `torch_tensor_cpp(data, dtype, device, requires_grad, pin_memory)`: CUDA error: out of memory\n")
    want = _facts(text)
    assert [k for k, *_ in want] == ["cuda_error"]
    assert _facts(_wrapped(text, 80)) == want  # "...: CUD" / "A error: out of memory"


def test_a_partial_reading_of_a_cut_row_gives_way_to_the_message_the_row_before_starts():
    text = ("E tensorflow/stream_executor/cuda/cuda_driver.cc:806] failed to allocate 236.75M (248250368 bytes) from "
            "device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\nmodel using cpu\n")
    want = _facts(text)
    assert [(k, r) for k, r, *_ in want] == [("tf_oom", 248250368)]
    assert _facts(_wrapped(text, 80)) == want  # its second row alone reads as a bare CUDA error


def test_the_rows_of_a_kill_line_are_not_its_block_rank_line():
    text = ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 (pid: 8530) of "
            "binary: /opt/conda/bin/python3\nTraceback (most recent call last):\n")
    want = [(e.kind, e.rank) for e in parse_text(text).events]
    assert want == [("host_oom", None)]
    assert [(e.kind, e.rank) for e in parse_text(_wrapped(text, 80)).events] == want  # "... local_" / "rank: 2 (pid"


def test_a_prefixed_line_wrapped_at_a_space_then_padded_goes_on_in_its_rows():
    msg = OOM + (" Including non-PyTorch memory, this process has 79.25 GiB memory in use. Of the allocated memory "
                 "73.91 GiB is allocated by PyTorch, and 2.41 GiB is reserved by PyTorch but unallocated.")
    cut = msg.index("79.25")  # the program's own rows (a pre-wrapped paste): "... process has " / "79.25 GiB ..."
    rows = ["[rank3]: " + msg[:cut], msg[cut:]]
    want = parse_text("\n".join(rows) + "\n").events[0]
    assert want.allocated_bytes and want.rank == 3
    padded = parse_text("".join(r + "  \n" for r in rows)).events[0]
    assert (padded.allocated_bytes, padded.reserved_bytes) == (want.allocated_bytes, want.reserved_bytes)


def test_a_frame_header_cut_into_rows_is_a_frame_again():
    text = ("Traceback (most recent call last):\n"
            "  File \"train.py\", line 97, in train\n"
            "    net = build_ssd('train', cfg['min_dim'], cfg['num_classes'])\n"
            "  File \"/home/user/.local/lib/python3.6/site-packages/torch/nn/modules/conv.py\", line 330, in __init__\n"
            "    False, _pair(0), groups, bias, padding_mode)\n"
            "RuntimeError: CUDA error: out of memory\n")
    want = _facts(text)
    assert want[0][4] == "init"  # the frames say the model was being built
    assert _facts(_wrapped(text, 80)) == want  # '  File ".../conv.py",' / ' line 330, in __init__'
    rows = [ln.text for ln in ctx.join_cut_frames(_lines(_wrapped(text, 80).split("\n")))]
    assert rows[3] == "  File \"/home/user/.local/lib/python3.6/site-packages/torch/nn/modules/conv.py\", line 330, in __init__"


def test_a_trigger_cut_over_a_row_end_is_found():
    text = ("** model inpainting could not be loaded: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:81] data. "
            "DefaultCPUAllocator: not enough memory: you tried to allocate 13107200 bytes.\n")
    cut = text.index("DefaultCPUAllocator") + len("DefaultCPUAllocat")
    want = _facts(text)
    assert want[0][:2] == ("host_oom", 13107200)
    assert _facts(text[:cut] + "\n" + text[cut:]) == want  # no row holds "DefaultCPUAllocator" whole


def test_a_bar_cut_in_two_is_one_bar_without_a_width_to_go_by():
    text = ("train split exist frame num: 158081\n"
            "100%|" + "#" * 130 + "| 158081/158081 [13:12<00:00, 199.36it/s]\n"
            "sample: 158081\nKilled\n")
    want = _facts(text)
    assert want[0][4:] == ("train", 158081)
    assert _facts(_wrapped(text, 120)) == want  # one full row: no terminal width is told


def test_a_bar_that_opens_and_closes_with_a_table_edge_is_no_table_row_when_cut_in_its_blanks():
    bar = "| epoch 001:   0%|" + " " * 70 + "| 0/820 [00:00<?, ?it/s]"
    text = (f"{bar}\n" + "x" * 100 + "\n"
            "THCudaCheck FAIL file=/home/user/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : out of memory\n")
    want = _facts(text)
    assert want[0][5] == 0
    assert _facts(_wrapped(text, 80)) == want  # "| epoch 001:   0%|" and blanks to the width, then the rest


IDE_LOG = ("发生异常: OutOfMemoryError       (note: full exception trace is shown but execution is paused at: "
           "_run_module_as_main)\n" + CACHING_2_1[len("torch.OutOfMemoryError: "):] + "\n"
           '  File "/usr/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 394, in __init__\n'
           "    self.device).clone().float().detach()\n"
           '  File "/usr/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 1507, in _configure_zero_optimizer\n'
           "    optimizer = DeepSpeedZeroOptimizer(\n")


def test_a_message_under_a_narrower_trigger_line_takes_the_terminal_width():
    want = _facts(IDE_LOG)
    assert want[0][4] == "init"  # the IDE's frames after the message: the optimizer being built
    assert _facts(_wrapped(IDE_LOG, 120)) == want  # the banner's row (114) is not the width the message was cut at


def test_an_ide_banner_cut_into_rows_still_heads_its_frames():
    assert _facts(_wrapped(IDE_LOG, 80)) == _facts(IDE_LOG)  # "发生异常: ... execution" / "is paused at: ...)"


def test_a_bar_cut_in_its_blanks_is_joined_in_a_console_copy_too():
    bar = "Epoch 1:  15%|" + "#" * 16 + " " * 100 + "| 347/2300 [08:11<51:33,  1.58s/it]"
    text = ("".join(f"loaded shard {k} of 8\n" for k in range(8)) + bar + "\n"
            + "RuntimeError: CUDA out of memory. Tried to allocate 268.00 MiB (GPU 0; 31.75 GiB total capacity; 29.89 "
              "GiB already allocated; 11.50 MiB free; 30.27 GiB reserved in total by PyTorch)\n")
    want = _facts(text)
    assert want[0][4:] == ("train", 2300 + 347)  # the second epoch's 347th step
    assert _facts(M._console(120)(text)) == want  # every row padded: only the bar's own shape tells its cut


def test_a_console_row_that_lost_a_wrap_space_in_its_padding_goes_on_in_the_next_line():
    msg = OOM + (" Including non-PyTorch memory, this process has 79.25 GiB memory in use. Of the allocated memory "
                 "73.91 GiB is allocated by PyTorch, and 2.41 GiB is reserved by PyTorch but unallocated.")
    cut = msg.index("79.25")  # the program's own rows: "... process has " / "79.25 GiB ..."; the console cuts the first
    text = "".join(f"loaded shard {k} of 8\n" for k in range(8)) + "[rank3]: " + msg[:cut] + "\n" + msg[cut:] + "\n"
    want = parse_text(text).events[0]
    assert want.allocated_bytes and want.rank == 3
    got = parse_text(M._console(120)(text)).events[0]
    assert (got.allocated_bytes, got.reserved_bytes, got.rank) == (want.allocated_bytes, want.reserved_bytes, 3)


def test_a_line_the_program_wrapped_and_a_terminal_cut_again_keeps_the_programs_width():
    text = ("".join(f"INFO:root:Epoch[0] Batch [{k}] Speed: 0.33 samples/sec Train-RCNNAcc=0.793918, RCNNLogLoss=0.64,   "
                    f"RCNNL1Loss=1.508526,\nMaskACC=0.913339,       MaskLogLoss=0.151808,\n" for k in (2240, 2260))
            + "terminate called after throwing an instance of 'dmlc::Error'\n"
            "  what():  [10:44:35] src/engine/./threaded_engine.h:359: [10:44:35] src/storage/./pooled_storage_manager"
            ".h:107: cudaMalloc fail\ned: out of memory\n")  # the program's own cut: "cudaMalloc fail" / "ed: ..."
    want = _facts(text)
    assert [k for k, *_ in want] == ["cuda_error"]
    assert _facts(_wrapped(text, 120)) == want  # the terminal cut the 128-column line again at 120


def test_a_complete_message_does_not_take_the_prefixed_frame_after_it():
    text = ("Exception has occurred: OutOfMemoryError\n"
            "CUDA out of memory. Tried to allocate 16.00 MiB (GPU 0; 4.00 GiB total capacity; 3.46 GiB already allocated; "
            "0 bytes free; 3.47 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting "
            "max_split_size_mb to avoid fragmentation.\n"
            '  File "C:\\\\Users\\\\user\\\\tts\\\\audio_test.py", line 8, in <module>\n'
            "    wav = generate_audio(text)\n")
    want = _facts(text)
    assert want[0][4] == "generate"
    assert _facts(M.TRANSFORMS["docker-compose"][0](text)) == want  # one row, as wide as itself: no cut is told
