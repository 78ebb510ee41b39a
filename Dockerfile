# One image, three deployables: the command picks the service
# (`hookstream relay | fanout | dispatcher | migrate | topics`).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY services ./services
COPY schemas ./schemas
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
RUN useradd --system --uid 10001 hookstream
COPY --from=build /install /usr/local
USER hookstream
# No .pyc writes at run time (pip compiled them at install): the root filesystem may be
# read-only (docker-compose.yml mounts only /tmp writable).
ENV HOOKSTREAM_HTTP_HOST=0.0.0.0 \
    HOOKSTREAM_LOG_FORMAT=json \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["hookstream"]
CMD ["--help"]
