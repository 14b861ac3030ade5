# Kafka Connect (distributed) with the Debezium PostgreSQL and MariaDB plugins, jars from Maven Central, and
# Tideline's text converter built into the plugin's directory (the connector config names it).
FROM maven:3.9-eclipse-temurin-17 AS jars
COPY stack/jvm /build
RUN mvn -q -B -f /build/pom.xml -pl kafka,debezium,debezium-mariadb,pg-text-converter,slim-source -am package

FROM eclipse-temurin:17-jre
COPY --from=jars /lib /opt/lib
COPY docker/connect-distributed.properties /opt/connect-distributed.properties
CMD ["sh", "-c", "sed -i \"s#@BOOTSTRAP@#$BOOTSTRAP_SERVERS#\" /opt/connect-distributed.properties && exec java -Xmx1g -cp '/opt/lib/kafka/*' org.apache.kafka.connect.cli.ConnectDistributed /opt/connect-distributed.properties"]
