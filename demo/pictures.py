"""The customer-service demo's two pictures, drawn with Pillow and committed under demo/fixtures:
the photo of a broken mug a customer sends (a JPEG with a camera's EXIF block, GPS included, so
that the copy a model or a person sees can be seen without it) and a scanned order form, in
Chinese, slightly rotated and noisy, that the FAQ base reads by OCR.

    python -m demo.pictures    # draws both again (deterministic: the same bytes each time)
"""

import io
import math
import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PHOTO = FIXTURES / "broken-mug.jpg"
ORDER_FORM = FIXTURES / "scanned-order-form.png"
# What the scanned form says, for the tests and the demo's question about it.
ORDER_FORM_NUMBER = "DD20261128015"
CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"

# EXIF tags (Pillow's ExifTags.Base and GPS numbering).
_MAKE, _MODEL, _DATETIME, _GPS_IFD = 0x010F, 0x0110, 0x0132, 0x8825


def photo_jpeg() -> bytes:
    """A white mug on a wooden table, cracked with a shard broken off, under a camera's EXIF."""
    rng = random.Random(56)
    image = Image.new("RGB", (480, 360), (168, 118, 74))
    draw = ImageDraw.Draw(image)
    for y in range(0, 360, 6):  # the table's grain
        shade = rng.randint(-18, 18)
        draw.line([(0, y), (480, y + rng.randint(-4, 4))], fill=(168 + shade, 118 + shade, 74 + shade), width=3)
    draw.ellipse([150, 270, 350, 310], fill=(120, 82, 50))  # shadow
    draw.rectangle([160, 110, 320, 290], fill=(236, 236, 230))  # body
    draw.ellipse([160, 270, 320, 305], fill=(236, 236, 230))
    draw.ellipse([160, 92, 320, 128], fill=(210, 210, 204), outline=(190, 190, 184), width=3)  # rim
    draw.arc([300, 150, 380, 240], start=-80, end=80, fill=(236, 236, 230), width=16)  # handle
    draw.polygon([(250, 100), (300, 104), (285, 160), (262, 140)], fill=(168, 118, 74))  # the missing piece
    crack = [(262, 140), (250, 175), (268, 205), (244, 240), (258, 288)]
    draw.line(crack, fill=(70, 60, 55), width=3)
    draw.line([(268, 205), (300, 222)], fill=(70, 60, 55), width=2)
    for x, y, size in ((380, 300, 22), (100, 318, 16), (410, 255, 12)):  # shards on the table
        angle = rng.uniform(0, math.pi)
        points = [(x + size * math.cos(angle + k * 2.1), y + 0.6 * size * math.sin(angle + k * 2.1)) for k in range(3)]
        draw.polygon(points, fill=(236, 236, 230), outline=(150, 150, 145))
    image = image.filter(ImageFilter.GaussianBlur(0.8))
    exif = Image.Exif()
    exif[_MAKE], exif[_MODEL], exif[_DATETIME] = "DemoPhone", "DemoPhone 12", "2026:12:01 09:30:00"
    # Chengdu, where the customer took the photo: what stripping keeps from any model or reader.
    exif.get_ifd(_GPS_IFD).update({1: "N", 2: (30.0, 39.0, 36.0), 3: "E", 4: (104.0, 3.0, 54.0)})
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=82, exif=exif)
    return out.getvalue()


def order_form_png() -> bytes:
    """A scanned order form: a heading, the order's number and date, three items, a total; black
    on greyish paper, turned by a degree and a half, with specks."""
    rng = random.Random(1128)
    font, small = ImageFont.truetype(CJK_FONT, 34), ImageFont.truetype(CJK_FONT, 28)
    page = Image.new("L", (1000, 760), 246)
    draw = ImageDraw.Draw(page)
    draw.text((330, 50), "商城订单确认单", fill=20, font=font)
    lines = [
        f"订单号：{ORDER_FORM_NUMBER}",
        "下单日期：2026年11月28日    收货人：王小明",
        "收货地址：成都市武侯区天府大道 100 号",
    ]
    for i, line in enumerate(lines):
        draw.text((70, 140 + i * 52), line, fill=25, font=small)
    top = 320
    rows = [("商品", "数量", "单价"), ("白色陶瓷马克杯", "2", "39.00元"), ("玻璃保温水杯", "1", "89.00元")]
    rows.append(("不锈钢咖啡勺", "4", "6.50元"))
    for i, (name, count, price) in enumerate(rows):
        y = top + i * 62
        draw.line([(60, y - 10), (940, y - 10)], fill=60, width=2)
        for x, text in ((80, name), (560, count), (720, price)):
            draw.text((x, y), text, fill=25, font=small)
    draw.line([(60, top + 4 * 62 - 10), (940, top + 4 * 62 - 10)], fill=60, width=2)
    draw.text((560, top + 4 * 62 + 20), "合计：193.00元", fill=20, font=font)
    draw.text((70, 690), "如需退换货，请保留本单并联系在线客服。", fill=40, font=small)
    for _ in range(900):  # the scanner's specks
        x, y = rng.randrange(1000), rng.randrange(760)
        page.putpixel((x, y), rng.choice((90, 140, 200)))
    page = page.rotate(1.5, resample=Image.BICUBIC, expand=True, fillcolor=238)
    out = io.BytesIO()
    page.save(out, format="PNG", optimize=True)
    return out.getvalue()


if __name__ == "__main__":
    PHOTO.write_bytes(photo_jpeg())
    ORDER_FORM.write_bytes(order_form_png())
    print(f"{PHOTO}: {PHOTO.stat().st_size} bytes; {ORDER_FORM}: {ORDER_FORM.stat().st_size} bytes")
