"""schemathesis against the server's own OpenAPI schema: >= 1,000 generated requests, no 5xx.

Valid and invalid bodies (schemathesis's positive and negative generation) go over
real HTTP to a live server with a small fake engine (n_ctx 64 bounds every
generation). Every response must be a non-5xx with a documented status code,
content type and schema (the OpenAI error shape for every 4xx and 503).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import DataGenerationMethod
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from edgespec.api.engine import Engine
from edgespec.frontends.server.app import create_app
from edgespec.frontends.server.running import serve_in_thread
from tests.fakes import make_engine

schemathesis.experimental.OPEN_API_3_1.enable()  # FastAPI writes OpenAPI 3.1
CHECKS = (
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
)
EXAMPLES = {"POST": 300, "GET": 20}


def fuzz(op, method: DataGenerationMethod, session: requests.Session) -> int:
    """Run `op` with generated cases; return how many ran."""
    ran = 0

    @given(case=op.as_strategy(data_generation_method=method))
    @settings(
        max_examples=EXAMPLES[op.method.upper()],
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        nonlocal ran
        response = case.call(session=session, timeout=30)
        case.validate_response(response, checks=CHECKS)
        ran += 1

    run()
    return ran


def small_engine() -> Engine:
    engine = make_engine(n_ctx=64)
    for model in (engine.target, engine.draft):
        model._out = np.zeros((64, model.n_vocab), dtype=np.float32)  # room for k up to 32 (the fake keeps 16)
    return engine


@pytest.mark.slow
def test_generated_requests_never_get_a_5xx() -> None:
    app = create_app(small_engine(), max_queue=2)
    counts: dict[str, int] = {}
    t0 = time.monotonic()
    with serve_in_thread(app) as url, requests.Session() as session:
        schema = schemathesis.from_dict(app.openapi(), base_url=url)
        for found in schema.get_all_operations():
            op = found.ok()
            methods = [DataGenerationMethod.positive]
            if op.method.upper() == "POST":  # GETs take no input to get wrong
                methods.append(DataGenerationMethod.negative)
            for method in methods:
                counts[f"{op.verbose_name} {method.name}"] = fuzz(op, method, session)
    total = sum(counts.values())
    print(f"schemathesis: {total} cases in {time.monotonic() - t0:.1f}s: {counts}")
    assert total >= 1000, counts
    assert app.state.queue.waiting == 0 and not app.state.queue.running


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q", "-s"])
