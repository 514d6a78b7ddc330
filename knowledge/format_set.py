"""The retrieval check's mixed Chinese and English set of office files and scans, built here
with the libraries that read them (python-docx, openpyxl, python-pptx, Pillow for the scans,
drawn in the CJK font the CI installs): two documents per format, whose answers the questions of
fixtures/formats/questions.json name. Built, not stored, so the set is its own source."""

import csv
import io
import json
from pathlib import Path

QUESTIONS = Path(__file__).resolve().parent / "fixtures" / "formats" / "questions.json"
# The font .ci/run installs (Debian's fonts-wqy-microhei) when no Chinese font is there; else
# another Chinese font the machine has (.ci/run installs none then).
CJK_FONT = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
_OTHER_CJK_FONTS = ("wqy-*.tt?", "NotoSansCJK*.tt?", "NotoSerifCJK*.tt?", "DroidSansFallback*.ttf")


def _cjk_font() -> str:
    if Path(CJK_FONT).exists():
        return CJK_FONT
    fonts = Path("/usr/share/fonts")
    found = (path for pattern in _OTHER_CJK_FONTS for path in sorted(fonts.rglob(pattern)))
    return str(next(found, CJK_FONT))


def _docx(title: str, parts: list[tuple[str, list[str]]], table: list[list[str]] | None = None) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading(title, level=0)
    for heading, paragraphs in parts:
        document.add_heading(heading, level=1)
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for row, values in zip(grid.rows, table, strict=True):
            for cell, value in zip(row.cells, values, strict=True):
                cell.text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _xlsx(sheets: dict[str, list[list]]) -> bytes:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def _pptx(slides: list[tuple[str, str, str]]) -> bytes:
    import pptx

    presentation = pptx.Presentation()
    for title, body, notes in slides:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        slide.notes_slide.notes_text_frame.text = notes
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def _csv(rows: list[list[str]], *, encoding: str, delimiter: str = ",") -> bytes:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter).writerows(rows)
    return out.getvalue().encode(encoding)


def scan_image(lines: list[str], *, width: int = 1240, line_height: int = 70):
    """A page as a scanner would give it: text drawn in black on white, as a Pillow image."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(_cjk_font(), 30)
    image = Image.new("RGB", (width, 120 + line_height * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((60, 60 + i * line_height), line, fill="black", font=font)
    return image


def scan_png(lines: list[str]) -> bytes:
    out = io.BytesIO()
    scan_image(lines).save(out, format="PNG")
    return out.getvalue()


def scan_pdf(pages: list[list[str]]) -> bytes:
    """An image-only PDF (no text layer), a scanned page per entry."""
    images = [scan_image(lines).convert("L") for lines in pages]
    out = io.BytesIO()
    images[0].save(out, format="PDF", save_all=True, append_images=images[1:], resolution=150)
    return out.getvalue()


def format_documents() -> list[tuple[str, str, bytes]]:
    """(format, file name, bytes) of each document of the set."""
    return [
        (
            "docx",
            "warranty-policy.docx",
            _docx(
                "保修政策 Warranty policy",
                [
                    ("保修期限", ["电子产品自签收之日起保修两年，配件保修六个月。", "保修期内非人为损坏免费维修。"]),
                    (
                        "Repair process",
                        [
                            "Send the product to our repair centre in Suzhou with the receipt.",
                            "Repairs are finished within 10 working days.",
                        ],
                    ),
                ],
            ),
        ),
        (
            "docx",
            "gift-cards.docx",
            _docx(
                "Gift cards 礼品卡",
                [
                    (
                        "Validity",
                        [
                            "Gift cards are valid for three years from the date of purchase.",
                            "A gift card cannot be exchanged for cash.",
                        ],
                    ),
                    ("挂失", ["礼品卡丢失后请凭购买凭证致电客服挂失，余额转入新卡。"]),
                ],
                table=[["面值 Value", "价格 Price"], ["100", "95"], ["500", "470"]],
            ),
        ),
        (
            "xlsx",
            "shipping-rates.xlsx",
            _xlsx(
                {
                    "运费 Shipping": [
                        ["地区 Region", "承运商 Carrier", "时效 Days", "运费 Fee (CNY)"],
                        ["新疆 Xinjiang", "EMS", "5-7", 25],
                        ["上海 Shanghai", "顺丰 SF Express", "1", 0],
                        ["Hong Kong 香港", "DHL", "3", 60],
                        [],
                        ["备注 Note", "偏远地区另加 10 元 remote areas add 10 CNY"],
                    ],
                    "Empty": [],
                }
            ),
        ),
        (
            "xlsx",
            "membership-tiers.xlsx",
            _xlsx(
                {
                    "会员等级 Tiers": [
                        ["等级 Tier", "年消费 Yearly spend", "折扣 Discount", "权益 Benefit"],
                        ["银卡 Silver", 1000, "98%", "生日礼券 birthday voucher"],
                        ["金卡 Gold", 5000, "95%", "免费包邮 free shipping on every order"],
                        ["钻石 Diamond", 20000, "90%", "专属客服经理 a personal account manager"],
                    ]
                }
            ),
        ),
        (
            "pptx",
            "loyalty-training.pptx",
            _pptx(
                [
                    ("积分规则 Points", "每消费一元积一分。", "Points expire at the end of the following year."),
                    ("积分兑换 Redeeming", "100 积分抵扣 1 元。", "积分可在结账时直接抵扣，最多抵扣订单金额的一半。"),
                ]
            ),
        ),
        (
            "pptx",
            "complaints-training.pptx",
            _pptx(
                [
                    (
                        "Handling complaints",
                        "Listen, apologise, solve, follow up.",
                        "A complaint must be answered within 24 hours.",
                    ),
                    ("升级流程 Escalation", "无法解决时转交主管。", "主管须在两个工作日内回电顾客。"),
                ]
            ),
        ),
        (
            "csv",
            "stores.csv",
            _csv(
                [
                    ["城市 City", "门店 Store", "营业时间 Hours", "电话 Phone"],
                    ["北京 Beijing", "三里屯店 Sanlitun", "10:00-22:00", "010-6500-1234"],
                    ["杭州 Hangzhou", "西湖店 West Lake", "09:30-21:30", "0571-8700-5678"],
                ],
                encoding="utf-8",
            ),
        ),
        (
            "csv",
            "courier-contacts-gbk.csv",
            _csv(
                [
                    ["快递公司", "客服电话", "说明"],
                    ["顺丰速运", "95338", "生鲜订单只走顺丰冷链"],
                    ["中通快递", "95311", "大件家具由中通配送"],
                ],
                encoding="gbk",
                delimiter=";",
            ),
        ),
        (
            "image",
            "scanned-order-form.png",
            scan_png(
                [
                    "订单修改申请表 Order change form",
                    "发货前可以修改收货地址，发货后无法修改。",
                    "The delivery address can be changed before shipping.",
                ]
            ),
        ),
        (
            "image",
            "scanned-invoice-notice.png",
            scan_png(
                [
                    "发票须知 Invoice notice",
                    "增值税专用发票需提供税号和开户银行。",
                    "Paper invoices are mailed within 7 days.",
                ]
            ),
        ),
        (
            "scanned pdf",
            "scanned-delivery-receipt.pdf",
            scan_pdf(
                [
                    ["签收单 Delivery receipt", "签收时请当面开箱验货。", "Check the parcel before signing."],
                    ["拒收说明 Refusing a parcel", "外包装破损可以拒收，运费由我们承担。"],
                ]
            ),
        ),
        (
            "scanned pdf",
            "scanned-installation-guide.pdf",
            scan_pdf(
                [
                    [
                        "安装服务 Installation service",
                        "大家电送货后48小时内免费上门安装。",
                        "Installation of air conditioners is free in the city.",
                    ],
                ]
            ),
        ),
    ]


def format_questions() -> list[dict]:
    """[{"format", "question", "document"}]: the file name whose content answers the question."""
    return json.loads(QUESTIONS.read_text(encoding="utf-8"))
