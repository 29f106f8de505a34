# The exec agent's image: the troupe binary on a Debian userland. Tasks run
# inside the agent's container, so they need what this image has: /bin/sh
# and the other tools they call, and the users they run as (nobody, or the
# users a namespace's RunAsPolicy allows; add them here). The troupe image
# is FROM scratch and has neither.
#
#   docker build -f deploy/kubernetes/agent.Dockerfile \
#     --build-arg VERSION=<version> -t troupe-agent:<version> .
ARG VERSION=dev
FROM troupe:${VERSION} AS troupe

FROM debian:bookworm-slim
COPY --from=troupe /troupe /troupe
# Root: the agent switches to each task's user (agent.yaml says which
# capabilities it keeps).
USER 0
ENTRYPOINT ["/troupe"]
CMD ["agent"]
