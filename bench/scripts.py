"""Fake-model scripts shared by the benchmarks: a 3-step agent (two tool steps, then an answer)."""


def three_step_script(latency_ms: int) -> dict:
    return {
        "scenarios": [
            {
                "match": ".",
                "steps": [
                    {
                        "tool_calls": [
                            {
                                "name": "mojitianqi-DayWeather",
                                "arguments": {
                                    "city": "成都市",
                                    "start_time": "2026年03月01日",
                                    "end_time": "2026年03月01日",
                                },
                            }
                        ],
                        "latency_ms": latency_ms,
                        "usage": {"prompt_tokens": 900, "completion_tokens": 40},
                    },
                    {
                        "tool_calls": [
                            {
                                "name": "gaodedetu-plan_bicycle",
                                "arguments": {"origin": "成都南站", "destination": "成都动物园"},
                            }
                        ],
                        "latency_ms": latency_ms,
                        "usage": {"prompt_tokens": 1100, "completion_tokens": 40},
                    },
                    {
                        "content": "明天多云，建议骑行。",
                        "latency_ms": latency_ms,
                        "usage": {"prompt_tokens": 1300, "completion_tokens": 60},
                    },
                ],
            }
        ]
    }
