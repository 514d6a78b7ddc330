"""Text from images: scanned pages and photos, read by RapidOCR (PP-OCRv6 det/rec, Chinese and
English, on onnxruntime, CPU only) in the limited child that reads the document.

The models ship inside the rapidocr wheel (rapidocr/models/); their paths are given explicitly,
so the engine never downloads one at run time. One engine per process, made on first use: the
child that reads a scanned document loads it once for all its pages. Images are opened with
Pillow and refused above a pixel limit before they are decoded (a decompression bomb).
"""

import io
import warnings
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext as _
from PIL import Image, ImageOps

_engine = None
_before_first_use = None


class OcrFailed(ValueError):
    pass


def before_first_use(callback) -> None:
    """Call `callback` once, before the engine is made: the limited child raises its limits to
    OCR's allowance then (knowledge.parsing)."""
    global _before_first_use
    _before_first_use = callback


def _ocr_engine():
    global _engine, _before_first_use
    if _engine is None:
        if _before_first_use is not None:
            callback, _before_first_use = _before_first_use, None
            callback()
        import rapidocr  # in the child that reads the file only: the models take ~1 GB to run

        models = Path(rapidocr.__file__).resolve().parent / "models"
        _engine = rapidocr.RapidOCR(
            params={
                "Global.log_level": "warning",
                # One thread: the child's CPU-time limit counts every thread, and a worker's host
                # runs other work; a page takes about a second on one core.
                "EngineConfig.onnxruntime.intra_op_num_threads": 1,
                "EngineConfig.onnxruntime.inter_op_num_threads": 1,
                # Detection on the page scaled to at most 1280 pixels a side (RapidOCR's default
                # scales the short side up to 736, several megapixels for an A4 scan): a third of
                # the detection time, and 150-dpi body text stays legible.
                "Det.limit_type": "max",
                "Det.limit_side_len": 1280,
                "Det.model_path": str(models / "PP-OCRv6_det_small.onnx"),
                "Rec.model_path": str(models / "PP-OCRv6_rec_small.onnx"),
                "Cls.model_path": str(models / "ch_ppocr_mobile_v2.0_cls_mobile.onnx"),
            }
        )
    return _engine


def pixels_check(width: int, height: int) -> None:
    limit = settings.AGENTRY_KNOWLEDGE_OCR_MAX_PIXELS
    if width * height > limit:
        raise OcrFailed(
            _("The image has %(pixels)s pixels (%(width)s×%(height)s), more than the limit of %(n)s.")
            % {"pixels": width * height, "width": width, "height": height, "n": limit}
        )


def image_open(data: bytes) -> Image.Image:
    """The image in the bytes, decoded once its size is known to be within the pixel limit."""
    try:
        with warnings.catch_warnings():
            # Pillow warns of a possible bomb past its own limit; ours is checked below.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            pixels_check(*image.size)
            image.load()
    except OcrFailed:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise OcrFailed(_("The image cannot be read: %(error)s") % {"error": exc}) from exc
    return image


def image_text(image: Image.Image) -> str:
    """The image's text, a line per text box in reading order (top to bottom)."""
    import numpy as np

    image = ImageOps.exif_transpose(image).convert("RGB")
    # RapidOCR takes OpenCV's channel order (BGR).
    result = _ocr_engine()(np.asarray(image)[:, :, ::-1])
    return "\n".join(text.strip() for text in (result.txts or ()) if text.strip())
