// The console's one way to the API: same origin, JSON bodies, the session's key if one was given.
// A refusal is an ApiError with the API's stable code and details.

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || { code: "http_" + status, message: "HTTP " + status };
    super(error.message);
    this.status = status;
    this.code = error.code;
    this.details = error.details || {};
  }
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem("agentflow.key");
  if (key) headers.Authorization = "Bearer " + key;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}
