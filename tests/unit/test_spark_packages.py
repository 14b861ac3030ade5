"""The jars an installed Tideline's Spark jobs ask Spark for by Maven coordinates
(tideline.spark_packages) are the ones the local stack's pom.xml fetches, at the same versions;
a host that names jar files gets those and no coordinates."""
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from tideline import targets
from tideline.spark_packages import SPARK, jars_and_packages

JVM = Path(__file__).resolve().parents[2] / "stack" / "jvm"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_coordinates(module: str) -> set[str]:
    props = {p.tag.split("}")[1]: p.text for p in ET.parse(JVM / "pom.xml").getroot().find("m:properties", NS)}
    out = set()
    for dep in ET.parse(JVM / module / "pom.xml").getroot().find("m:dependencies", NS):
        version = re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], dep.find("m:version", NS).text)
        out.add(f"{dep.find('m:groupId', NS).text}:{dep.find('m:artifactId', NS).text}:{version}")
    return out


def test_the_coordinates_are_the_pom_files_at_their_versions():
    assert set(SPARK) == pom_coordinates("spark")
    assert set(targets.spec("iceberg").packages) == pom_coordinates("iceberg")


def test_named_jar_files_win_and_coordinates_fill_in_what_is_not_named():
    iceberg = targets.spec("iceberg")
    assert iceberg.spark_jars_and_packages({}) == ("", ",".join([*SPARK, *iceberg.packages]))
    named = {"TIDELINE_SPARK_JARS": "/j/a.jar,/j/b.jar"}
    assert iceberg.spark_jars_and_packages(named) == ("/j/a.jar,/j/b.jar", ",".join(iceberg.packages))
    both = {**named, "TIDELINE_ICEBERG_JARS": "/j/ice.jar"}
    assert iceberg.spark_jars_and_packages(both) == ("/j/a.jar,/j/b.jar,/j/ice.jar", "")
    assert jars_and_packages("", (), named) == ("/j/a.jar,/j/b.jar", "")
    assert targets.spec("postgres").spark_jars_and_packages({}) == ("", ",".join(SPARK))
