# Airflow 3 + the Tideline library + pyspark with the Kafka connector, JDBC and Iceberg jars. Pipelines
# are not baked in: compose mounts them (docker/docker-compose.yml). The same image
# runs the Spark master and workers of the compose deployment (spark-class from the PySpark install).
FROM maven:3.9-eclipse-temurin-17 AS jars
COPY stack/jvm /build
RUN mvn -q -B -f /build/pom.xml -pl spark,iceberg -am package

# the Tideline view's charting library, pinned by its package-lock.json
FROM node:20-slim AS charts
COPY plugins/tideline/view/package.json plugins/tideline/view/package-lock.json /view/
RUN cd /view && npm ci --no-audit --no-fund

FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless && rm -rf /var/lib/apt/lists/*
COPY requirements.txt /opt/tideline/requirements.txt
RUN pip install --no-cache-dir -r /opt/tideline/requirements.txt
COPY dags /opt/tideline/dags
COPY plugins /opt/tideline/plugins
COPY spark_jobs /opt/tideline/spark_jobs
COPY sql /opt/tideline/sql
COPY --from=jars /lib/spark /opt/tideline/stack/lib/spark
COPY --from=jars /lib/iceberg /opt/tideline/stack/lib/iceberg
COPY --from=charts /view/node_modules /opt/tideline/plugins/tideline/view/node_modules
RUN mkdir -p /opt/tideline/pipelines /opt/airflow/logs /opt/airflow/auth /var/lib/tideline/lake
ENV PYTHONPATH=/opt/tideline/plugins:/opt/tideline AIRFLOW_HOME=/opt/airflow
ENTRYPOINT ["airflow"]
