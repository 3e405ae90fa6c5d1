"""The engine's ErrorCode mirrors the wire enum, name for name and number for number."""

from __future__ import annotations

from regroup.reconciler import ErrorCode
from regroup.v1 import common_pb2


def test_error_codes_match_the_protobuf_enum() -> None:
    # __members__ includes aliases, so a number reused under two names would show up here.
    engine = {name: code.value for name, code in ErrorCode.__members__.items()}
    wire = dict(common_pb2.ErrorCode.items())

    assert engine == wire


def test_every_engine_error_code_is_on_the_wire() -> None:
    for code in ErrorCode:
        assert common_pb2.ErrorCode.Value(code.name) == code.value
        assert common_pb2.ErrorCode.Name(common_pb2.ErrorCode.ValueType(code.value)) == code.name


def test_every_protobuf_error_code_is_known_to_the_engine() -> None:
    for name, number in common_pb2.ErrorCode.items():
        assert ErrorCode[name].value == number
        assert ErrorCode(number).name == name
