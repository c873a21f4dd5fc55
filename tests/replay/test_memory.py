"""A 50 MB log is streamed: the reader's peak Python allocation stays a small fraction of the file."""

import json
import tracemalloc

from chaos.replay import Item, iter_log


def test_50_mb_jsonl_streams_in_bounded_memory(tmp_path):
    p = tmp_path / "big.jsonl"
    text = "reach me at someone@example.com; " + "lorem ipsum dolor sit amet, consectetur 2024 " * 105  # ~4.8 kB
    n_lines = 0
    with open(p, "w") as f:
        while f.tell() < 50 * 1024 * 1024:
            f.write(json.dumps({"timestamp": 1700000000 + n_lines * 0.01, "request": {
                "messages": [{"role": "user", "content": text}], "max_tokens": 16}, "response": {"status": 200}}))
            f.write("\n")
            n_lines += 1
    size = p.stat().st_size
    count, last = 0, None
    tracemalloc.start()
    try:
        for it in iter_log(p):
            assert isinstance(it, Item)
            count, last = count + 1, it
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n_lines and last.line_no == n_lines
    assert abs(last.offset_s - (n_lines - 1) * 0.01) < 1e-3
    assert last.body["messages"][0]["content"] == text and last.status == 200
    assert peak < size / 50, (peak, size)  # well below the file: a few lines' worth, not the file


def test_csv_trace_streams_in_bounded_memory(tmp_path):
    p = tmp_path / "azure.csv"
    rows = 20_000
    with open(p, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens,Note\n")  # extra columns are ignored
        pad = "x" * 200  # a bigger file for the same parsing time: the bound is then clear of the fixed costs
        for i in range(rows):
            f.write(f"2023-11-16 18:{15 + i // 6000:02d}:{(i // 100) % 60:02d}.{i % 100:02d}00000,{50 + i % 700},"
                    f"{1 + i % 300},{pad}\n")
    size = p.stat().st_size
    tracemalloc.start()
    try:
        count = total_tokens = 0
        for it in iter_log(p):
            assert isinstance(it, Item)
            count += 1
            total_tokens += it.input_tokens
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == rows and total_tokens == sum(50 + i % 700 for i in range(rows))
    assert peak < size / 20, (peak, size)  # each row's synthesised prompt is dropped after the next row
