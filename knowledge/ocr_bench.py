"""OCR's cost on this machine: CPU and wall time per scanned page, and a scanned PDF read by the
worker's limited child. Prints numbers (docs/knowledge.md quotes them):

    .venv/bin/python -m knowledge.ocr_bench [--pages 5]
"""

import argparse
import resource
import statistics
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=5)
    parser.add_argument("--lines", type=int, default=20)
    options = parser.parse_args()
    django.setup()

    from knowledge import ocr
    from knowledge.extract import ExtractionFailed
    from knowledge.format_set import scan_image, scan_pdf
    from knowledge.parsing import sections_from_bytes_limited

    # A page of a form as a scanner gives it at 150 dpi: lines of mixed Chinese and English.
    lines = [
        f"第{i}行 订单号 A{i:04d} 退货地址 苏州工业园区 Line {i}: returns accepted within 30 days"
        for i in range(options.lines)
    ]
    page = scan_image(lines, width=1754, line_height=80)
    started, cpu = time.perf_counter(), time.process_time()
    ocr.image_text(page)
    print(f"page {page.size[0]}×{page.size[1]}, {options.lines} lines of about 60 characters")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - started
    print(f"first page (loads the models): {cpu:.2f} s CPU, {wall:.2f} s")
    walls, cpus = [], []
    for _ in range(options.pages):
        started, cpu = time.perf_counter(), time.process_time()
        ocr.image_text(page)
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(
        f"per page, median of {options.pages}: {statistics.median(cpus) * 1000:.0f} ms CPU, "
        f"{statistics.median(walls) * 1000:.0f} ms wall; peak resident {peak} MB"
    )
    started = time.perf_counter()
    try:
        _title, sections = sections_from_bytes_limited(
            scan_pdf([lines] * options.pages), filename="scan.pdf", content_type=""
        )
        outcome = f"{len(sections)} pages read"
    except ExtractionFailed as exc:
        outcome = str(exc)
    print(f"a {options.pages}-page scanned PDF in the limited child: {time.perf_counter() - started:.2f} s, {outcome}")


if __name__ == "__main__":
    main()
