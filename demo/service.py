"""The demo's stand-in for the weather and map services of seed 000.

Deterministic, so the demo and the tests can rely on the branch it leads the model into:
成都 is cloudy (as in the seed), 重庆 has light rain, other cities follow a stable hash.
"""

import hashlib
import re

_WEATHER = {
    "成都": {
        "condition": "多云",
        "temp_low": 10,
        "temp_high": 18,
        "wind_dir": "东北风",
        "wind_level": "2",
        "humidity": 76,
    },
    "重庆": {
        "condition": "小雨",
        "temp_low": 9,
        "temp_high": 14,
        "wind_dir": "北风",
        "wind_level": "1",
        "humidity": 91,
    },
    "北京": {
        "condition": "晴",
        "temp_low": -3,
        "temp_high": 8,
        "wind_dir": "西北风",
        "wind_level": "3",
        "humidity": 30,
    },
}
_CONDITIONS = ["晴", "多云", "阴", "小雨", "中雨"]


def _stable_int(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _iso_date(text: str) -> str:
    match = re.search(r"(\d{4})\D(\d{1,2})\D(\d{1,2})", text or "")
    if not match:
        return text or ""
    year, month, day = match.groups()
    return f"{year}-{int(month):02d}-{int(day):02d}"


def day_weather(city: str, date: str) -> dict:
    key = city.removesuffix("市")
    known = _WEATHER.get(key)
    if known is None:
        n = _stable_int(key)
        known = {
            "condition": _CONDITIONS[n % len(_CONDITIONS)],
            "temp_low": 5 + n % 10,
            "temp_high": 15 + n % 10,
            "wind_dir": "东风",
            "wind_level": str(1 + n % 4),
            "humidity": 40 + n % 50,
        }
    return {
        "wind_dir_day": known["wind_dir"],
        "wind_level_day": known["wind_level"],
        "temp_high": known["temp_high"],
        "condition": known["condition"],
        "wind_dir_night": known["wind_dir"],
        "predict_date": _iso_date(date),
        "weather_day": known["condition"],
        "wind_level_night": known["wind_level"],
        "temp_low": known["temp_low"],
        "humidity": known["humidity"],
    }


def human_duration(seconds: int) -> str:
    """A trip's duration as a person says it: "25 分钟", "1 小时 33 分钟" (whole minutes, rounded)."""
    minutes = int(seconds / 60 + 0.5)
    if minutes < 1:
        return "不到 1 分钟"
    hours, minutes = divmod(minutes, 60)
    if not hours:
        return f"{minutes} 分钟"
    return f"{hours} 小时" + (f" {minutes} 分钟" if minutes else "")


def plan_route(mode: str, origin: str, destination: str, with_paths: bool = True) -> dict:
    distance = 3000 + _stable_int(f"{origin}->{destination}") % 20000
    speed_m_per_s = 11.0 if mode == "driving" else 2.9
    route = {
        "mode": mode,
        "origin": origin,
        "destination": destination,
        "distance_m": distance,
        "duration_s": int(distance / speed_m_per_s),
    }
    # The seconds for a program, the text for the answer a person reads.
    route["duration_text"] = human_duration(route["duration_s"])
    if with_paths:
        verb = "驾车" if mode == "driving" else "骑行"
        legs = [distance // 4, distance // 2, distance - distance // 4 - distance // 2]
        route["steps"] = [
            f"从{origin}出发，{verb} {legs[0]} 米",
            f"继续{verb} {legs[1]} 米后右转",
            f"{verb} {legs[2]} 米到达{destination}",
        ]
    return route
