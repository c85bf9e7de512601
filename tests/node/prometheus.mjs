// Reading Prometheus text expositions (GET /metrics) in the node tests.

// Sums every sample of `name` (all label sets, or those containing `label`, e.g.
// 'finished_reason="abort"') in a Prometheus text exposition.
export function metricValue(text, name, label = "") {
  let total = null;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const nameEnd = line.search(/[{\s]/);
    if (nameEnd < 0 || line.slice(0, nameEnd) !== name) continue;
    const labelsEnd = line[nameEnd] === "{" ? line.indexOf("}", nameEnd) + 1 : nameEnd;
    if (label && !line.slice(nameEnd, labelsEnd).includes(label)) continue;
    const afterLabels = line.slice(labelsEnd);
    const value = Number(afterLabels.trim().split(/\s+/)[0]);
    if (Number.isNaN(value)) continue;
    total = (total ?? 0) + value;
  }
  return total;
}
