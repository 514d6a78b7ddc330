"""The customer-service demo's order service: a small HTTP API its order agent calls through
two HTTP tools (seed 001's 订单查询智能体).

Standard library only, in memory, bound to loopback. scripts/dev.sh runs it as a process of the
stack (`python -m demo.orders --port 8902`), so the demo's agents keep working for as long
as the stack runs; `agentry_demo --customer-service` starts one in a thread for its own duration
when nothing listens on the port. The worker reaches it through the outbound guard (its
host:port must be in AGENTRY_OUTBOUND_ALLOWLIST).

    GET  /orders/{order_id}           the order, or 404
    POST /orders/{order_id}/address   {"address": "..."}: change where an unshipped order goes
"""

import argparse
import copy
import errno
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEMO_ORDERS = {
    "DD20261130001": {
        "order_id": "DD20261130001",
        "status": "已付款，待发货",
        "items": [{"name": "保温杯 500ml", "quantity": 1, "price": "89.00"}],
        "address": "成都市锦江区春熙路 8 号",
        "carrier": "",
        "tracking_no": "",
    },
    "DD20261128042": {
        "order_id": "DD20261128042",
        "status": "已发货",
        "items": [{"name": "蓝牙耳机", "quantity": 1, "price": "299.00"}],
        "address": "重庆市渝中区解放碑 1 号",
        "carrier": "顺丰速运",
        "tracking_no": "SF1234567890",
    },
}
_ORDER = re.compile(r"^/orders/(?P<order_id>[A-Za-z0-9_-]{1,40})(?P<address>/address)?/?$")
_MAX_BODY = 10_000


class _Handler(BaseHTTPRequestHandler):
    server: "OrderServer"

    def log_message(self, format, *args):
        # The demo prints the run trees; request lines on stderr would interleave with them.
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _order(self, address: bool):
        match = _ORDER.match(self.path.split("?", 1)[0])
        if match is None or bool(match["address"]) != address:
            self._send(404, {"error": "not found"})
            return None
        order = self.server.orders.get(match["order_id"])
        if order is None:
            self._send(404, {"error": f"no order {match['order_id']}"})
        return order

    def do_GET(self):
        order = self._order(address=False)
        if order is not None:
            self._send(200, order)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY:
            self._send(413, {"error": "body too large"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "the body is not JSON"})
            return
        address = body.get("address") if isinstance(body, dict) else None
        if not isinstance(address, str) or not address.strip() or len(address) > 200:
            self._send(400, {"error": "address: a non-empty text of at most 200 characters"})
            return
        with self.server.lock:
            order = self._order(address=True)
            if order is None:
                return
            if order["carrier"]:
                self._send(409, {"error": "the order has shipped; its address can no longer change"})
                return
            previous, order["address"] = order["address"], address.strip()
        self._send(200, {"order_id": order["order_id"], "address": order["address"], "previous_address": previous})


class OrderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address):
        super().__init__(address, _Handler)
        self.orders = copy.deepcopy(DEMO_ORDERS)
        self.lock = threading.Lock()


def order_service_start(*, host: str = "127.0.0.1", port: int = 0) -> tuple[str, OrderServer]:
    """Serve the demo orders in a daemon thread: (base URL, server); `server.shutdown()` stops it.
    Port 0 picks a free one."""
    server = OrderServer((host, port))
    threading.Thread(target=server.serve_forever, name="demo-orders", daemon=True).start()
    return f"http://{host}:{server.server_address[1]}", server


def order_service_start_or_reuse(*, host: str = "127.0.0.1", port: int) -> tuple[str, OrderServer | None]:
    """As order_service_start; when the port is taken (the stack's own service, run by
    scripts/dev.sh), (its base URL, None): the caller then uses the service that is there."""
    try:
        return order_service_start(host=host, port=port)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or port == 0:
            raise
        return f"http://{host}:{port}", None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m demo.orders", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8902)
    args = parser.parse_args(argv)
    server = OrderServer((args.host, args.port))
    print(f"demo order service on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
