"""The stack's ports reserved from the kernel's ephemeral range (stack/services/ports.py)."""
from services.ports import parse, reserve_ports, stack_ports


def test_parse_reads_single_ports_and_ranges():
    assert parse("") == set()
    assert parse("55432, 58080-58082\n") == {55432, 58080, 58081, 58082}


def test_reserve_adds_only_missing_ports_and_keeps_the_others(tmp_path):
    path = tmp_path / "ip_local_reserved_ports"
    path.write_text("8080,58080-58081\n")
    assert reserve_ports(path) is None
    reserved = parse(path.read_text())
    assert {8080, 58080, 58081} <= reserved
    assert set(stack_ports()) <= reserved
    before = path.read_text()
    assert reserve_ports(path) is None and path.read_text() == before   # nothing written twice


def test_every_mode_s_ports_are_reserved():
    ports = stack_ports()
    assert 58080 in ports and 55432 in ports and 59092 in ports
    assert 59096 in ports and 59097 in ports            # Kafka's third node (+4)
    assert 58182 in ports                               # the second Spark worker's UI
    assert {59192, 59193, 59196, 59197, 58093} <= set(ports)   # the cluster test's Kafka and Connect
    assert {56432, 54306, 58183} <= set(ports)   # test_secure's PostgreSQL, MariaDB and Connect


def test_without_the_right_to_write_it_says_why(tmp_path):
    path = tmp_path / "ip_local_reserved_ports"
    path.write_text("")
    path.chmod(0o444)
    why = reserve_ports(path)
    if why is None:      # root ignores the file's mode: nothing to check here then
        assert set(stack_ports()) <= parse(path.read_text())
    else:
        assert "could not reserve ports" in why and "58080" in why


def test_an_unreadable_sysctl_is_said(tmp_path):
    assert "cannot read" in reserve_ports(tmp_path / "missing")
