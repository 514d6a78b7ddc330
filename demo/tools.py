"""The three tools of seed 000's customer-service agent, over the demo service (demo.service),
registered through AGENTRY_TOOL_MODULES."""

import json

from demo import service
from tools.registry import python_tool

# The schemas are seed 000's, verbatim (including its empty nested "properties").
_WEATHER_SCHEMA = {
    "description": "",
    "properties": {
        "city": {
            "description": "市名，包括直辖市，比如：北京市、天津市、上海市、重庆市",
            "properties": {},
            "type": "string",
        },
        "end_time": {"description": "待查询结束日期", "properties": {}, "type": "string"},
        "province": {
            "description": "省份名，不要包括直辖市(比如：北京、北京市、北京省、天津市、上海市、重庆市)",
            "properties": {},
            "type": "string",
        },
        "start_time": {"description": "待查询开始日期", "properties": {}, "type": "string"},
        "towns": {"description": "区/县/镇", "properties": {}, "type": "string"},
        "villages": {"description": "乡/村", "properties": {}, "type": "string"},
    },
    "type": "object",
}


def _route_schema(paths_hint: str) -> dict:
    return {
        "description": "",
        "properties": {
            "destination": {
                "description": "目标地点。可以是关键词；也可以是经纬度，经纬度之间用英文逗号分隔",
                "properties": {},
                "type": "string",
            },
            "disable_paths": {"description": paths_hint, "properties": {}, "type": "boolean"},
            "origin": {
                "description": "起点。可以是关键词；也可以是经纬度，经纬度之间用英文逗号分隔",
                "properties": {},
                "type": "string",
            },
        },
        "required": ["destination", "origin"],
        "type": "object",
    }


def _dump(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@python_tool(
    name="mojitianqi-DayWeather",
    description="获取国内指定日期的天气，不支持获取国外天气情况。",
    parameters=_WEATHER_SCHEMA,
    idempotent=True,
)
def day_weather(*, ctx, city: str = "", start_time: str = "", end_time: str = "", **_location) -> str:
    if not city:
        return "参数city不能为空，请提供城市名后再重试。"
    return _dump({"data": [service.day_weather(city, start_time or end_time)]})


@python_tool(
    name="gaodedetu-plan_driving",
    description="驾驶路线规划",
    parameters=_route_schema("是否禁止返回路径详情, default value is false"),
    idempotent=True,
)
def plan_driving(*, ctx, origin: str, destination: str, disable_paths: bool = False) -> str:
    return _dump(service.plan_route("driving", origin, destination, not disable_paths))


@python_tool(
    name="gaodedetu-plan_bicycle",
    description="骑行路线规划",
    parameters=_route_schema("是否禁止展示路径详情, default value is false"),
    idempotent=True,
)
def plan_bicycle(*, ctx, origin: str, destination: str, disable_paths: bool = False) -> str:
    return _dump(service.plan_route("bicycle", origin, destination, not disable_paths))
